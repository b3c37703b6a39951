"""Start-up refuses a user-content domain the panel's cookies could reach (DESIGN.md rule 17).

On a cluster every notebook and app is served on a subdomain of USER_CONTENT_DOMAIN, by the
gateway: with none set, or one that is the panel's host, inside it or around it, a user's
server would share the panel's cookies (or could plant its own for the panel: cookie tossing),
so every management command (the web pods' migrating init container, `check --deploy`) and
gunicorn itself (wsgi.py) stop with the reason. A session or CSRF cookie Domain that covers the
content domain is refused on every backend. The local backend derives `localhost:<port>`,
which shares nothing with 127.0.0.1."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from controlpanel.usercontent.domain import ContentDomain, cookie_overlap, within

FIX = (
    "Set USER_CONTENT_DOMAIN to a domain of its own, such as usercontent.example.com (best: "
    "another registrable domain than the panel's), with a wildcard DNS record and certificate "
    "for *.<it> pointing at the user-content gateway (docs/deploy-kubernetes.md)."
)


def _panel_hosts() -> list[str]:
    hosts = [urlsplit(settings.SITE_URL).hostname or ""]
    hosts += [host.lstrip(".") for host in settings.ALLOWED_HOSTS]
    return [host for host in hosts if host and host != "*"]


def _domain_problems(content: ContentDomain | None) -> list[str]:
    if settings.COMPUTE_BACKEND != "kubernetes":
        return []
    if content is None:
        return [
            "USER_CONTENT_DOMAIN is not set: notebooks and apps would have no origin of their "
            "own to be served on"
        ]
    found = (cookie_overlap(panel_host=host, content=content) for host in _panel_hosts())
    return sorted({problem for problem in found if problem})


def _cookie_problems(content: ContentDomain | None) -> list[str]:
    problems = []
    for name in ("SESSION_COOKIE_DOMAIN", "CSRF_COOKIE_DOMAIN"):
        value = (getattr(settings, name, None) or "").lstrip(".").lower()
        if content is not None and value and within(content.host, value):
            problems.append(f"{name}={value} sends the panel's cookie to every content host")
    return problems


def user_content_problems() -> list[str]:
    """Why the panel may not serve user content as configured; empty when it may."""
    content: ContentDomain | None = settings.USER_CONTENT_DOMAIN
    return _domain_problems(content) + _cookie_problems(content)


@register()
def user_content_domain_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return [Error(f"{problem}.", hint=FIX, id="ajuste.E110") for problem in user_content_problems()]


def refuse_shared_origin() -> None:
    """gunicorn runs no system checks: the web process refuses here (wsgi.py)."""
    problems = user_content_problems()
    if problems:
        raise ImproperlyConfigured(f"ajuste.E110: {'; '.join(problems)}. {FIX}")
