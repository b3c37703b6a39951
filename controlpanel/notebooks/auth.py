"""Where a notebook is served and the editor's own token.

Every notebook is served at the root of its own host under USER_CONTENT_DOMAIN
(controlpanel/usercontent: `nb-<id>.<domain>`), the same across stops and starts. Who may reach
it is decided there (controlpanel/notebooks/usercontent.py), for the gateway's every request.

The editor's token is derived (HMAC of SECRET_KEY, the notebook and its run) rather than stored:
nothing to keep in step, a new one for every start. It goes into the notebook's Secret when the
notebook is applied (the local backend's environment), and into the gateway's answer, which puts
it on the request it sends upstream: no browser ever holds it.
"""

from __future__ import annotations

from django.utils.crypto import salted_hmac

from controlpanel.engine.models import Workload
from controlpanel.notebooks.states import NotebookState

# The states in which a notebook's editor may be reached (STOPPING: saving before it stops).
SERVING = frozenset({NotebookState.STARTING, NotebookState.RUNNING, NotebookState.STOPPING})


def notebook_path(notebook: Workload) -> str:
    """Where the editor serves on its host: the root (the host is the notebook's own)."""
    return "/"


def notebook_token(notebook: Workload) -> str:
    """The editor token of the notebook's current run (changes with every start)."""
    value = f"{notebook.pk}:{notebook.run}"
    return salted_hmac("ajuste.notebook-token", value, algorithm="sha256").hexdigest()
