"""A notebook's editor as user content (controlpanel/usercontent): on `nb-<id>.<domain>`, for
its owner signed in to the panel (and the project's members once shared: sharing.py), while it
serves. Its server gets the
editor's token in `Authorization` (JupyterLab requires it) from the gateway, never from the
browser."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from controlpanel.engine.backend import job_ref
from controlpanel.notebooks.auth import SERVING, notebook_path, notebook_token
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.sharing import notebook_opener
from controlpanel.usercontent.served import Content, Target, cluster_address, loopback_address
from deploy import names
from deploy.manifests.notebooks import SERVICE_PORT
from deploy.types import Editor


class NotebookContent(Content, model=Notebook, kind="notebook", prefix="nb", browser=True):
    def admits(self, notebook: Notebook, *, user: Any, authorization: str) -> tuple[int, str]:
        """The panel's rule for a notebook's pages (sharing.py): its owner, or a member of
        its project when the owner shared it, signed in; an API token opens no notebook."""
        if user is None:
            return 401, "Sign in to the panel to open this notebook."
        return notebook_opener(user=user, notebook=notebook)

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
