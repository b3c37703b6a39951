"""Who may open a notebook on a cluster: the forward-auth endpoint ingress-nginx asks before
every request to a notebook (`NOTEBOOK_AUTH_URL/<id>`), and the editor's own token.

The endpoint answers 2xx only to a logged-in user of the notebook's project, for a notebook
that is serving (STARTING, RUNNING, STOPPING), and only when the request it vouches for goes to
this notebook's own path (`/nb/<project>/<id>/`): a cookie for one notebook never opens
another. 401 sends a browser to log in (the Ingress's auth-signin); everything else is 403 (to
ingress-nginx, any other status is its own failure, a 500). It reads rows only.

ingress-nginx calls it over plain http at the web Service's cluster name, so it is answered
before the ALLOWED_HOSTS and HTTPS checks (engine/forward_auth.py, like the health probes): it
builds no URL from the Host header and sets no cookie, so neither check protects anything here.

The editor's token is derived (HMAC of SECRET_KEY, the notebook and its run) rather than stored:
nothing to keep in step, a new one for every start. It goes into the notebook's Secret when the
notebook is applied, and into the `Authorization` header of the endpoint's answer, which
ingress-nginx puts on the upstream request (auth-response-headers). It is sent only to a caller
that addressed the endpoint at NOTEBOOK_AUTH_URL's host (the cluster-internal Service name, which
the panel's own Ingress never routes), so a browser asking the endpoint itself never sees it.
"""

from __future__ import annotations

import uuid
from importlib import import_module
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.contrib import auth
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.crypto import salted_hmac

from controlpanel.engine.models import Workload
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.access import project_access

# The states in which a notebook's editor may be reached (STOPPING: saving before it stops).
SERVING = frozenset({NotebookState.STARTING, NotebookState.RUNNING, NotebookState.STOPPING})


def notebook_path(notebook: Workload) -> str:
    """Where the notebook is served on NOTEBOOK_HOST: stable across stop and start."""
    return f"/nb/{notebook.project.slug}/{notebook.id}/"


def notebook_token(notebook: Workload) -> str:
    """The editor token of the notebook's current run (changes with every start)."""
    value = f"{notebook.pk}:{notebook.run}"
    return salted_hmac("ajuste.notebook-token", value, algorithm="sha256").hexdigest()


def notebook_auth(request: HttpRequest, notebook_id: uuid.UUID) -> HttpResponse:
    """ingress-nginx's auth subrequest for one notebook (see the module's docstring)."""
    if request.method not in ("GET", "HEAD"):
        return _answer(405)
    user = _session_user(request)
    if not user.is_authenticated:
        return _answer(401)
    notebook = (
        Notebook.objects.select_related("project")
        .only("id", "run", "state", "project__slug")
        .filter(pk=notebook_id)
        .first()
    )
    if notebook is None or not _member(user, notebook) or notebook.state not in SERVING:
        return _answer(403)
    if not _for_this_notebook(request, notebook_path(notebook)):
        return _answer(403)
    response = _answer(200)
    response["X-Ajuste-User"] = user.get_username()
    response["X-Ajuste-Project"] = notebook.project.slug
    if _from_the_ingress(request):
        response["Authorization"] = f"token {notebook_token(notebook)}"
    return response


def _answer(status: int) -> HttpResponse:
    response = HttpResponse(status=status)
    response["Cache-Control"] = "no-store"
    return response


def _session_user(request: HttpRequest) -> Any:
    """The session's user, read as AuthenticationMiddleware would (the middleware stack has
    not run: this is answered before it). An inactive or logged-out user is anonymous."""
    if not hasattr(request, "session"):
        engine = import_module(settings.SESSION_ENGINE)
        key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        request.session = engine.SessionStore(key)
    return auth.get_user(request)


def _member(user: Any, notebook: Notebook) -> bool:
    """The one access rule of the panel: a member of the project (or a site admin)."""
    try:
        project_access(user=user, slug=notebook.project.slug)
    except (Http404, PermissionDenied):
        return False
    return True


def _for_this_notebook(request: HttpRequest, base: str) -> bool:
    """Whether the request nginx asks about goes to `base` (`/nb/<project>/<id>/`): every
    original path it names (X-Original-URL, X-Original-URI) must lie under it once decoded,
    with no `.` or `..` segment (nginx routes by the normalised path, names the raw one)."""
    originals = [
        request.headers.get("X-Original-URL", ""),
        request.headers.get("X-Original-URI", ""),
    ]
    paths = [unquote(urlsplit(value).path) for value in originals if value]
    return bool(paths) and all(_under(path, base) for path in paths)


def _under(path: str, base: str) -> bool:
    if "\\" in path or any(part in (".", "..") for part in path.split("/")):
        return False
    return path == base.rstrip("/") or path.startswith(base)


def _from_the_ingress(request: HttpRequest) -> bool:
    """Whether the caller addressed the endpoint at NOTEBOOK_AUTH_URL's host (ingress-nginx
    sets Host from the auth URL), not at the panel's public address."""
    host = request.META.get("HTTP_HOST", "").rsplit(":", 1)[0].lower()
    return host == (urlsplit(settings.NOTEBOOK_AUTH_URL).hostname or "").lower()
