"""Who may open a notebook's editor (issue 25): its owner, the project's members once the owner
shared it with the project, and the members the owner shared it with one by one. A manager (or
a site admin) may stop or delete anyone's notebook (engine/services.workload_locked), not open
it: an editor is a shell with its owner's volumes and secrets. So only the owner shares (a
manager sharing it with themselves would open it); the owner or a manager may take a share back.
Asked by the gate for every request to the notebook's host and by Open. Every change is
audited (`notebook.share`, `notebook.unshare`)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404

from controlpanel import audit
from controlpanel.engine.models import Workload
from controlpanel.projects.access import ProjectAccess, project_access
from controlpanel.projects.models import Membership

SHARED = "shared"  # the key in the notebook's params: shared with the whole project
# The memberships (their ids) it is shared with, one by one: a member who leaves loses the
# share with their membership, and rejoining does not bring it back.
SHARED_WITH = "shared_with"
NOT_SHARED = "Only its owner can open this notebook, unless they share it with the project."


def notebook_shared(notebook: Workload) -> bool:
    return bool((notebook.params or {}).get(SHARED))


def notebook_shared_with(notebook: Workload) -> list[int]:
    return [int(pk) for pk in (notebook.params or {}).get(SHARED_WITH, [])]


def notebook_shares(notebook: Workload) -> dict[str, Any]:
    """{"project": shared with the project, "members": the usernames of the current members it
    is shared with, sorted}: someone who left is not listed (and cannot open it)."""
    members = Membership.objects.filter(
        project_id=notebook.project_id, pk__in=notebook_shared_with(notebook)
    ).values_list("user__username", flat=True)
    return {"project": notebook_shared(notebook), "members": sorted(members)}


def share_candidates(notebook: Workload) -> list[str]:
    """The usernames the owner may still share it with, for the page's select: the project's
    active members other than the owner, not shared with yet (notebook_share_member decides)."""
    return list(
        Membership.objects.filter(project_id=notebook.project_id, user__is_active=True)
        .exclude(user_id=notebook.owner_id)
        .exclude(pk__in=notebook_shared_with(notebook))
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )


def notebook_opener(*, user: Any, notebook: Workload) -> tuple[int, str]:
    """(200, "") when `user` may open the notebook, else 403 and why: nothing is said of
    another project's notebooks."""
    try:
        project_access(user=user, slug=notebook.project.slug)
    except (Http404, PermissionDenied):
        return 403, "No such notebook."
    if notebook.owner_id == user.pk or notebook_shared(notebook):
        return 200, ""
    shared_with = notebook_shared_with(notebook)
    if (
        shared_with
        and Membership.objects.filter(
            pk__in=shared_with, project_id=notebook.project_id, user_id=user.pk
        ).exists()
    ):
        return 200, ""
    return 403, NOT_SHARED


def notebook_share(*, access: ProjectAccess, user: Any, notebook: Workload) -> Workload:
    """Let the project's members open it too (the owner's decision alone)."""
    return _set_shared(user=user, notebook=notebook, shared=True)


def notebook_unshare(*, access: ProjectAccess, user: Any, notebook: Workload) -> Workload:
    """Only its owner again: the members' open editors are refused from the next request
    (the gateway keeps a yes for USER_CONTENT_CACHE_SECONDS at most)."""
    return _set_shared(user=user, notebook=notebook, shared=False)


def notebook_share_member(
    *, access: ProjectAccess, user: Any, notebook: Workload, member: str
) -> Workload:
    """Let one current member of the project open it (the owner's decision alone)."""
    _owner_only(user, notebook, "share it")
    membership = _membership(notebook, member)
    target = membership.user
    if target.pk == notebook.owner_id:
        raise ValidationError({"member": "The owner can open their own notebook already."})
    with transaction.atomic():
        locked = _locked(notebook)
        ids = notebook_shared_with(locked)
        if membership.pk not in ids:
            locked.params = {**(locked.params or {}), SHARED_WITH: [*ids, membership.pk]}
            locked.save(update_fields=["params"])
            audit.record(
                "notebook.share", actor=user, project=locked.project, target=locked,
                member=target.get_username(),
            )  # fmt: skip
    return locked


def notebook_unshare_member(
    *, access: ProjectAccess, user: Any, notebook: Workload, member: str
) -> Workload:
    """Take one member's share back (the owner, or a manager): their open editor is refused
    from its next request (within USER_CONTENT_CACHE_SECONDS)."""
    if notebook.owner_id != user.pk and not access.can_manage:
        raise PermissionDenied("Only the notebook's owner or a manager can take a share back.")
    with transaction.atomic():
        locked = _locked(notebook)
        ids = notebook_shared_with(locked)
        membership = (
            Membership.objects.filter(
                pk__in=ids, project_id=notebook.project_id, user__username=member
            )
            .select_related("user")
            .first()
        )
        if membership is None:
            raise ValidationError({"member": f"The notebook is not shared with {member}."})
        target = membership.user
        locked.params = {
            **(locked.params or {}),
            SHARED_WITH: [i for i in ids if i != membership.pk],
        }
        locked.save(update_fields=["params"])
        audit.record(
            "notebook.unshare", actor=user, project=locked.project, target=locked,
            member=target.get_username(),
        )  # fmt: skip
    return locked


def _membership(notebook: Workload, username: str) -> Membership:
    """The membership of the active user `username` in the notebook's project; else why not."""
    username = (username or "").strip()
    if not username:
        raise ValidationError({"member": "Name the member to share it with (a username)."})
    membership = (
        Membership.objects.select_related("user")
        .filter(project_id=notebook.project_id, user__username=username, user__is_active=True)
        .first()
    )
    if membership is None:
        # The same sentence whether the account exists or not: nothing is said of outsiders.
        raise ValidationError({"member": f"{username} is not a member of this project."})
    return membership


def _owner_only(user: Any, notebook: Workload, what: str) -> None:
    if notebook.owner_id != user.pk:
        raise PermissionDenied(f"Only the notebook's owner can {what}.")


def _locked(notebook: Workload) -> Workload:
    return type(notebook).objects.select_for_update().select_related("project").get(pk=notebook.pk)


def _set_shared(*, user: Any, notebook: Workload, shared: bool) -> Workload:
    _owner_only(user, notebook, "share it or stop sharing it")
    notebook.params = {**(notebook.params or {}), SHARED: shared}
    notebook.save(update_fields=["params"])
    audit.record(
        "notebook.share" if shared else "notebook.unshare",
        actor=user, project=notebook.project, target=notebook, member="(the project)",
    )  # fmt: skip
    return notebook
