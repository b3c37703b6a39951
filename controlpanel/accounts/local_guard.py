"""The local backend's rule, where accounts are made and reactivated.

With COMPUTE_BACKEND=local every notebook is a shell as the panel's own OS user (JupyterLab has
a terminal), beside its secret key, database and every project's credentials. The start-up
check (controlpanel/workloads/checks.py) refuses a second active user, but only when a process
starts: an account added later got that shell at once (issue 25). So the people pages, an
invitation's sign-up and a first single sign-on refuse to add or reactivate a second active
account too, unless AJUSTE_LOCAL_BACKEND_TRUSTED=1 says everyone may read everything.
`createsuperuser` and the Django admin are the operator's own tools and are left alone.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

REFUSAL = (
    "This panel runs workloads on its own machine (COMPUTE_BACKEND=local), as its own OS user: "
    "a second active account could read the panel's secrets and every project's data through "
    "a notebook's terminal. Run it with COMPUTE_BACKEND=kubernetes, or set "
    "AJUSTE_LOCAL_BACKEND_TRUSTED=1 if everyone who can log in may read everything it holds."
)


def local_backend_untrusted() -> bool:
    return settings.COMPUTE_BACKEND == "local" and not settings.AJUSTE_LOCAL_BACKEND_TRUSTED


def refuse_another_active_user(*, user: Any = None) -> None:
    """ValidationError(REFUSAL) when making `user` (or a new account) active would leave the
    untrusted local backend with more than one active account."""
    if not local_backend_untrusted():
        return
    others = get_user_model().objects.filter(is_active=True)
    if user is not None and user.pk is not None:
        others = others.exclude(pk=user.pk)
    if others.exists():
        raise ValidationError(REFUSAL, code="local_backend")


def notebook_start_refusal() -> str | None:
    """REFUSAL when a notebook may not start now: the untrusted local backend with more than
    one active account (one added since the process started included, issue 25); else None."""
    if local_backend_untrusted() and get_user_model().objects.filter(is_active=True)[1:2]:
        return REFUSAL
    return None


def refuse_notebook_start() -> None:
    """ValidationError(REFUSAL) under `notebook_start_refusal`'s rule, under `detail` (no
    field of the request is at fault: the API's key for that, and above a page's form)."""
    refusal = notebook_start_refusal()
    if refusal:
        raise ValidationError({"detail": ValidationError(refusal, code="local_backend")})
