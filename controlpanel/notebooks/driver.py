"""How the engine runs a notebook: its request for deploy/ (one name across its starts, the
same address and workspace), what an observation of it means (it runs until stopped: a stop it
did not ask for is a failure), and its objects' cleanup."""

from __future__ import annotations

from django.conf import settings

from controlpanel.accounts.local_guard import notebook_start_refusal
from controlpanel.engine.backend import get_backend, request_fields
from controlpanel.engine.driver import OneNameDriver, settled_state
from controlpanel.engine.models import Workload
from controlpanel.notebooks.auth import notebook_path, notebook_token
from controlpanel.notebooks.states import NotebookState as N
from controlpanel.notebooks.usercontent import SERVED
from controlpanel.queues.selectors import interactive_queue
from controlpanel.usercontent.hosts import content_host
from deploy.types import DeployError, Editor, NotebookRequest, ObservedWorkload, Phase

_PHASES = {
    Phase.QUEUED: N.STARTING,
    Phase.INITIALIZING: N.STARTING,
    Phase.PENDING: N.STARTING,
    Phase.RUNNING: N.RUNNING,
    Phase.STOPPING: N.STOPPING,
    Phase.FINALIZING: N.STOPPING,
    Phase.SUCCEEDED: N.STOPPED,
    Phase.STOPPED: N.STOPPED,
    Phase.FAILED: N.FAILED,
    Phase.ERROR: N.ERROR,
}


def notebook_request(notebook: Workload) -> NotebookRequest:
    queue_name, priority_class = interactive_queue(project=notebook.project)
    return NotebookRequest(
        **request_fields(notebook),
        editor=Editor(notebook.editor or Editor.JUPYTERLAB),
        running=not notebook.stop_requested,
        volumes=notebook.volume_specs,
        workspace_gib=settings.NOTEBOOK_WORKSPACE_GIB,
        storage_class=settings.KUBERNETES_STORAGE_CLASS,
        host=content_host(SERVED.prefix, notebook.id).netloc,
        path=notebook_path(notebook),
        token=notebook_token(notebook),
        queue_name=queue_name,
        priority_class=priority_class,
    )


def notebook_states(notebook: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
    """A notebook runs until it is stopped: a stop it did not ask for is a failure, and a
    stopped server seen while the row wants it running is the previous start's (ignored:
    reconcile starts it)."""
    phase, reason = observed.phase, observed.reason
    if phase is Phase.GONE:
        if notebook.launched_run >= notebook.run and notebook.state != N.DELETING:
            return [(N.ERROR, "the notebook disappeared from the cluster")]
        return []
    if phase is Phase.SYNC_FAILED:
        return [(N.FAILED, f"the push of rw volumes failed, the workspace is kept: {reason}")]
    if phase is Phase.SUCCEEDED and not notebook.stop_requested:
        return [(N.FAILED, reason or "the notebook server exited")]
    state = _PHASES[phase]
    if state in (N.STOPPING, N.STOPPED) and not notebook.stop_requested:
        return []
    if notebook.stop_requested and state in (N.STARTING, N.RUNNING):
        state = N.STOPPING
    if notebook.stop_requested and notebook.state == N.STOPPING and notebook.state_reason:
        # Why it stops is what the stop said (the user, the idle limit, the GPU policy), not
        # what the backend shows of its objects meanwhile nor its word for any stop.
        reason = notebook.state_reason
    return settled_state(state, reason, N.STOPPED)


class NotebookDriver(OneNameDriver, backend_kind="notebook", states=notebook_states):
    def apply(self, notebook: Workload) -> ObservedWorkload:
        refusal = None if notebook.stop_requested else notebook_start_refusal()
        if refusal:  # an account added since the start was asked for (issue 25)
            raise DeployError(refusal)
        return get_backend().apply_notebook(notebook=notebook_request(notebook))


DRIVER = NotebookDriver()
