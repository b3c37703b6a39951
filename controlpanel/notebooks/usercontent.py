"""A notebook's editor as user content (controlpanel/usercontent): on `nb-<id>.<domain>`, for
the members of its project signed in to the panel, while it serves. Its server gets the
editor's token in `Authorization` (JupyterLab requires it) from the gateway, never from the
browser."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404

from controlpanel.engine.backend import job_ref
from controlpanel.notebooks.auth import SERVING, notebook_path, notebook_token
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.access import project_access
from controlpanel.usercontent.served import Target, cluster_address, loopback_address
from deploy import names
from deploy.manifests.notebooks import SERVICE_PORT
from deploy.types import Editor


class NotebookContent:
    kind = "notebook"
    prefix = "nb"
    noun = "notebook"
    browser = True
    cacheable = True

    def find(self, workload_id: uuid.UUID) -> Notebook | None:
        rows = Notebook.objects.select_related("project")
        return rows.filter(pk=workload_id).first()

    def admits(self, notebook: Notebook, *, user: Any, authorization: str) -> tuple[int, str]:
        """The panel's rule for a notebook's pages: a member of its project (or a site
        admin), signed in; an API token opens no notebook."""
        if user is None:
            return 401, "Sign in to the panel to open this notebook."
        try:
            project_access(user=user, slug=notebook.project.slug)
        except (Http404, PermissionDenied):
            return 403, "No such notebook."
        return 200, ""

    def target(self, notebook: Notebook) -> Target | None:
        if notebook.state not in SERVING:
            return None
        if settings.COMPUTE_BACKEND == "kubernetes":
            address: str | None = cluster_address(
                service=names.notebook_name(job_ref(notebook)),
                namespace=notebook.project.namespace,
                port=SERVICE_PORT,
            )
        else:
            address = loopback_address(notebook.url)
        if address is None:
            return None
        editor = notebook.editor or Editor.JUPYTERLAB
        token = f"token {notebook_token(notebook)}" if editor == Editor.JUPYTERLAB else ""
        return Target(address=address, authorization=token)

    def landing(self, notebook: Notebook) -> str:
        return notebook_path(notebook)


SERVED = NotebookContent()
