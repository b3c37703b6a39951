"""What an audit event's target, project and user read as on the page: the object's name and a
link to its page where the viewer may open it, plain text otherwise (the object is gone, or
has no page the viewer may see). A page of events costs one query per kind of target, not one
per row."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.urls import NoReverseMatch, reverse
from django.utils.http import urlencode

from controlpanel.audit.models import AuditEvent
from controlpanel.projects.selectors import projects_for_user


@dataclass(frozen=True)
class Link:
    """`text` always; `url` where the viewer may open the object; `title`: the raw id."""

    text: str
    url: str = ""
    title: str = ""


@dataclass(frozen=True)
class Shown:
    """One event's target, project and user as the page shows them."""

    target: Link | None
    project: Link | None
    actor: Link | None


def _uuids(ids: Iterable[str]) -> list[uuid.UUID]:
    found = []
    for value in ids:
        try:
            found.append(uuid.UUID(value))
        except ValueError:
            continue
    return found


def _ints(ids: Iterable[str]) -> list[int]:
    return [int(value) for value in ids if value.isdigit() and len(value) < 19]


def _url(route: str, /, **kwargs: Any) -> str:
    """The route's path, "" when it takes other arguments (positional only: a route's own
    argument may be called `name`, as a bucket's is)."""
    try:
        return reverse(route, kwargs=kwargs)
    except NoReverseMatch:
        return ""


def _if(allowed: bool, url: str) -> str:
    return url if allowed else ""


class _Viewer:
    """What the viewer may open: projects (members, or every one for site admins), people's
    pages (site admins), Django admin pages (by the model's view permission)."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self._slugs: set[str] | None = None
        self.people: set[int] = set()  # the actors that still have an account

    def project(self, slug: str) -> bool:
        if self._slugs is None:
            self._slugs = set(projects_for_user(user=self.user).values_list("slug", flat=True))
        return slug in self._slugs

    def admin_page(self, model: type[Any]) -> bool:
        meta = model._meta
        return bool(self.user.is_staff) and self.user.has_perm(
            f"{meta.app_label}.view_{meta.model_name}"
        )


def _workloads(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.engine.models import Workload

    rows = Workload.objects.filter(pk__in=_uuids(ids)).select_related("project")
    links = {}
    for row in rows:
        slug = row.project.slug
        url = _url(f"{row.kind}-detail", slug=slug, **{f"{row.kind}_id": row.pk})
        text = f"{row.kind} {row.name} ({row.pk.hex[:8]})"
        links[str(row.pk)] = Link(text, url if viewer.project(slug) else "", str(row.pk))
    return links


def _projects(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.projects.models import Project

    rows = Project.objects.filter(pk__in=_ints(ids))
    return {
        str(row.pk): Link(
            f"project {row.name} ({row.slug})",
            _url("project-home", slug=row.slug) if viewer.project(row.slug) else "",
        )
        for row in rows
    }


def _buckets(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.buckets.models import Bucket

    links = {}
    for row in Bucket.objects.filter(pk__in=_ints(ids)).select_related("project"):
        slug = row.project.slug
        url = _url("bucket-browse", slug=slug, datastore=row.datastore, name=row.name)
        links[str(row.pk)] = Link(
            f"bucket {row.name}@{row.datastore}", _if(viewer.project(slug), url)
        )
    return links


def _memberships(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.projects.models import Membership

    links = {}
    for row in Membership.objects.filter(pk__in=_ints(ids)).select_related("user", "project"):
        slug = row.project.slug
        text = f"membership of {row.user.username} in {slug}"
        links[str(row.pk)] = Link(text, _if(viewer.project(slug), _url("member-list", slug=slug)))
    return links


def _invitations(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.accounts.models import Invitation

    links = {}
    for row in Invitation.objects.filter(pk__in=_ints(ids)).select_related("project"):
        slug = row.project.slug
        text = f"invitation of {row.email} to {slug}"
        links[str(row.pk)] = Link(text, _if(viewer.project(slug), _url("member-list", slug=slug)))
    return links


def _users(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    people = bool(viewer.user.is_staff)
    return {
        str(row.pk): Link(
            f"user {row.username}", _if(people, _url("person-detail", user_id=row.pk)), str(row.pk)
        )
        for row in get_user_model().objects.filter(pk__in=_ints(ids))
    }


def _tokens(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.accounts.models import ApiToken

    rows = ApiToken.objects.filter(pk__in=_ints(ids)).select_related("user")
    return {str(row.pk): Link(f"token {row.name} of {row.user.username}") for row in rows}


def _periods(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.billing.models import Period

    links = {}
    for row in Period.objects.filter(pk__in=_ints(ids)):
        month = f"{row.month:%Y-%m}"
        url = f"{_url('billing')}?{urlencode({'month': month})}" if viewer.user.is_staff else ""
        links[str(row.pk)] = Link(f"billing month {month}", url)
    return links


def _prices(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.flavors.models import FlavorPrice

    rows = FlavorPrice.objects.filter(pk__in=_ints(ids)).select_related("flavor")
    url = _url("billing-prices") if viewer.user.is_staff else ""
    return {
        str(row.pk): Link(f"price of {row.flavor.name} from {row.valid_from:%Y-%m-%d %H:%M}", url)
        for row in rows
    }


def _sweeps(ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    from controlpanel.sweeps.models import Sweep

    links = {}
    for row in Sweep.objects.filter(pk__in=_uuids(ids)).select_related("project"):
        slug = row.project.slug
        url = _if(viewer.project(slug), _url("sweep-detail", slug=slug, sweep_id=row.pk))
        links[str(row.pk)] = Link(f"sweep {row.name} ({row.pk.hex[:8]})", url, str(row.pk))
    return links


Resolver = Callable[[set[str], _Viewer], dict[str, Link]]
RESOLVERS: dict[str, Resolver] = {
    "workload": _workloads,
    "job": _workloads,
    "notebook": _workloads,
    "app": _workloads,
    "project": _projects,
    "bucket": _buckets,
    "membership": _memberships,
    "invitation": _invitations,
    "user": _users,
    "apitoken": _tokens,
    "period": _periods,
    "flavorprice": _prices,
    "sweep": _sweeps,
}


def _admin_pages(kind: str, ids: set[str], viewer: _Viewer) -> dict[str, Link]:
    """Any other model the Django admin edits (its events come from there): its change page."""
    types = list(ContentType.objects.filter(model=kind)[:2])
    model = types[0].model_class() if len(types) == 1 else None
    if model is None or not admin.site.is_registered(model) or not viewer.admin_page(model):
        return {}
    meta = model._meta
    keys = _ints(ids) if meta.pk.get_internal_type().endswith("AutoField") else list(ids)
    return {
        str(row.pk): Link(
            f"{meta.verbose_name} {row}",
            _url(f"admin:{meta.app_label}_{meta.model_name}_change", object_id=row.pk),
        )
        for row in model._default_manager.filter(pk__in=keys)
    }


def _gone(event: AuditEvent) -> Link:
    """A target that no longer exists (or of no known kind): its name if the event kept one."""
    name = event.details.get("name") or event.details.get("object") or ""
    short = event.target_id[:8] + ("…" if len(event.target_id) > 8 else "")
    text = f"{event.target_type} {name or short}" + (" (deleted)" if name else "")
    return Link(text.strip(), "", event.target_id)


def _secret(event: AuditEvent, viewer: _Viewer) -> Link:
    """A project secret: by its name (the events keep it), on its project's page."""
    slug, name = event.project_slug, str(event.details.get("name") or event.target_id)
    url = _url("project-home", slug=slug) + "#secrets" if viewer.project(slug) else ""
    return Link(f"secret {name}", url)


def shown_events(events: list[AuditEvent], *, viewer: Any) -> dict[int, Shown]:
    """Each event's target, project and user as `viewer` sees them, by event id."""
    who = _Viewer(viewer)
    wanted: dict[str, set[str]] = defaultdict(set)
    for event in events:
        if event.target_type and event.target_type != "projectsecret":
            wanted[event.target_type].add(event.target_id)
    found: dict[tuple[str, str], Link] = {}
    actors = {event.actor_id for event in events if event.actor_id}
    who.people = set(get_user_model().objects.filter(pk__in=actors).values_list("pk", flat=True))
    for kind, ids in wanted.items():
        resolver = RESOLVERS.get(kind)
        links = resolver(ids, who) if resolver else _admin_pages(kind, ids, who)
        found |= {(kind, key): link for key, link in links.items()}
    return {event.pk: _shown(event, found, who) for event in events}


def _shown(event: AuditEvent, found: dict[tuple[str, str], Link], who: _Viewer) -> Shown:
    target = None
    if event.target_type == "projectsecret":
        target = _secret(event, who)
    elif event.target_type:
        target = found.get((event.target_type, event.target_id)) or _gone(event)
    project = None
    if event.project_slug:
        url = _url("project-home", slug=event.project_slug)
        project = Link(event.project_slug, url if who.project(event.project_slug) else "")
    actor = None
    if event.actor_username:
        page = who.user.is_staff and event.actor_id in who.people
        actor = Link(event.actor_username, _if(page, _url("person-detail", user_id=event.actor_id)))
    return Shown(target, project, actor)
