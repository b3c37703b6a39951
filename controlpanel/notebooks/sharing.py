"""Who may open a notebook's editor (issue 25): its owner, and the project's members once the
owner shared it with the project. A manager (or a site admin) may stop or delete anyone's
notebook (engine/services.workload_locked), not open it: an editor is a shell with its owner's
volumes and secrets. Asked by the gate for every request to the notebook's host and by Open."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404

from controlpanel.engine.models import Workload
from controlpanel.projects.access import ProjectAccess, project_access

SHARED = "shared"  # the key in the notebook's params
NOT_SHARED = "Only its owner can open this notebook, unless they share it with the project."


def notebook_shared(notebook: Workload) -> bool:
    return bool((notebook.params or {}).get(SHARED))


def notebook_opener(*, user: Any, notebook: Workload) -> tuple[int, str]:
    """(200, "") when `user` may open the notebook, else 403 and why: nothing is said of
    another project's notebooks."""
    try:
        project_access(user=user, slug=notebook.project.slug)
    except (Http404, PermissionDenied):
        return 403, "No such notebook."
    if notebook.owner_id == user.pk or notebook_shared(notebook):
        return 200, ""
    return 403, NOT_SHARED


def notebook_share(*, access: ProjectAccess, user: Any, notebook: Workload) -> Workload:
    """Let the project's members open it too (the owner's decision alone)."""
    return _set_shared(user=user, notebook=notebook, shared=True)


def notebook_unshare(*, access: ProjectAccess, user: Any, notebook: Workload) -> Workload:
    """Only its owner again: the members' open editors are refused from the next request
    (the gateway keeps a yes for USER_CONTENT_CACHE_SECONDS at most)."""
    return _set_shared(user=user, notebook=notebook, shared=False)


def _set_shared(*, user: Any, notebook: Workload, shared: bool) -> Workload:
    if notebook.owner_id != user.pk:
        raise PermissionDenied("Only the notebook's owner can share it or stop sharing it.")
    notebook.params = {**(notebook.params or {}), SHARED: shared}
    notebook.save(update_fields=["params"])
    return notebook
