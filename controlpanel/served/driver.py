"""How the engine runs an app: its request for deploy/ (one name across its starts, the same
URL), what an observation of it means (it serves until stopped; RUNNING with fewer replicas
ready than wanted is SCALING), and what the sweep does with the objects of an app that ended
but still has replicas (stopped: they would hold their GPUs unbilled)."""

from __future__ import annotations

import logging
from dataclasses import replace

from django.conf import settings

from controlpanel.engine.backend import get_backend, request_fields
from controlpanel.engine.driver import OneNameDriver, settled_state
from controlpanel.engine.models import FINAL_STATES, Workload
from controlpanel.engine.sweep import grace_start
from controlpanel.queues.selectors import interactive_queue
from controlpanel.served.config import Serving, app_path
from controlpanel.served.states import AppState as A
from controlpanel.usercontent.hosts import content_host
from deploy.types import AppRequest, ObservedWorkload, Phase

log = logging.getLogger(__name__)
_PHASES = {
    Phase.QUEUED: A.QUEUED,
    Phase.INITIALIZING: A.INITIALIZING,
    Phase.PENDING: A.INITIALIZING,
    Phase.RUNNING: A.RUNNING,
    Phase.STOPPING: A.STOPPING,
    Phase.FINALIZING: A.STOPPING,
    Phase.SUCCEEDED: A.STOPPED,
    Phase.STOPPED: A.STOPPED,
    Phase.SYNC_FAILED: A.STOPPED,
    Phase.FAILED: A.FAILED,
    Phase.ERROR: A.ERROR,
}


def app_request(app: Workload) -> AppRequest:
    config = Serving.of(app)
    weights = app.volume_specs
    adapter = weights[1] if config.adapter and len(weights) > 1 else None
    queue_name, priority_class = interactive_queue(project=app.project)
    return AppRequest(
        **request_fields(app),
        model=weights[0],
        adapter=adapter,
        served_name=config.model_name,
        running=not app.stop_requested,
        scaling=config.scaling,
        volumes=weights[2 if adapter else 1 :],
        probe_path=config.probe_path,
        port=config.port,
        public=config.public,
        keda=settings.APP_KEDA,
        host=content_host("app", app.id).netloc,
        path=app_path(app),
        model_gib=settings.APP_MODEL_GIB,
        prometheus_url=settings.APP_PROMETHEUS_URL,
        queue_name=queue_name,
        priority_class=priority_class,
    )


def app_states(app: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
    """An app serves until it is stopped: a server that exits on its own failed; RUNNING
    with fewer replicas ready than wanted is SCALING (a scale or a rolling update)."""
    phase, reason = observed.phase, observed.reason
    if phase is Phase.GONE:
        if app.launched_run >= app.run and app.state != A.DELETING:
            return [(A.ERROR, "the app disappeared from the cluster")]
        return []
    if phase is Phase.SUCCEEDED and not app.stop_requested:
        return [(A.FAILED, reason or "the server exited")]
    state = _PHASES[phase]
    if state in (A.STOPPING, A.STOPPED) and not app.stop_requested:
        return []
    if app.stop_requested and state in (A.QUEUED, A.INITIALIZING, A.RUNNING):
        state = A.STOPPING
    if state == A.RUNNING and observed.replicas is not None:
        ready, wanted = observed.replicas
        if ready != wanted:
            return [(A.SCALING, f"{ready} of {wanted} replicas ready")]
        reason = f"{ready} replica{'s' if ready != 1 else ''} ready" if wanted else "scaled to zero"
    return settled_state(state, reason, A.STOPPED)


class AppDriver(OneNameDriver, backend_kind="app", states=app_states):
    def apply(self, app: Workload) -> ObservedWorkload:
        return get_backend().apply_app(app=app_request(app))

    def left_running(self, row: Workload, observed: ObservedWorkload) -> bool:
        """An ended app (FAILED, ERROR) whose backend still runs (or restarts) its replicas:
        stopped, its address kept for a start."""
        if row.state not in FINAL_STATES or row.state_changed_at > grace_start():
            return False
        if observed.phase in (Phase.STOPPED, Phase.STOPPING):
            return False
        log.warning("app %s ended %s with replicas left: stop", observed.id, row.state)
        get_backend().apply_app(app=replace(app_request(row), running=False))
        return True


DRIVER = AppDriver()
