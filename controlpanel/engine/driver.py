"""What a kind gives the engine to run it: how its objects are driven through deploy/'s backend
and what an observation of them means for its states. Each kind subclasses `Driver` in its
package's driver.py and its spec (registry.py) names the instance; the engine (reconcile,
lifecycle, sweep, tasks) calls it and knows no kind."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime

from controlpanel.engine.backend import ensure_project, get_backend, job_ref
from controlpanel.engine.lifecycle import end_runs, record_launch
from controlpanel.engine.models import DELETING, Workload
from controlpanel.engine.orphans import unknown
from controlpanel.engine.sweep import ORPHANS_PER_SWEEP, rows_of, settled
from controlpanel.streams import channels
from deploy.types import ObservedWorkload, Phase, WorkloadRef

log = logging.getLogger(__name__)


class Driver(ABC):
    """One kind's part of reconcile, observation, the sweep and finalizing."""

    @abstractmethod
    def drive(self, workload: Workload) -> ObservedWorkload | None:
        """One reconcile step: move the backend toward what the row says (the row is locked,
        admitted, its launch checked); what the backend shows after, or None when the step
        ended the workload here instead (its objects gone, a push refused)."""

    @abstractmethod
    def observe(self, workload: Workload) -> ObservedWorkload:
        """A fresh read of what the backend has of the workload."""

    @abstractmethod
    def targets(self, workload: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
        """The state(s) an observation of the current run leads to, in order, with reasons."""

    @abstractmethod
    def delete_objects(self, ref: WorkloadRef) -> None:
        """Delete a run's objects (404: already gone)."""

    def passed(
        self, workload: Workload, observed: ObservedWorkload
    ) -> list[tuple[str, str, datetime]]:
        """States the run went through between two observations, at the backend's times."""
        return []

    def stale(self, workload: Workload, observed: ObservedWorkload) -> bool:
        """Whether an observation speaks of something the row has moved past (and must not be
        applied) that ranks cannot tell."""
        return False

    def start_push(self, workload: Workload) -> ObservedWorkload | None:
        """The run's final push is still to start (`needs_apply`): start it; what the backend
        shows after, or None when the run ended here instead. Only a kind with a final push
        is ever told this; any other looks again."""
        return self.observe(workload)

    def orphans(self, observations: list[ObservedWorkload]) -> int:
        """Act on the kind's objects that no live row claimed (the sweep's leftovers); how
        many were acted on."""
        return 0

    def ended(self, workload: Workload, run: int) -> None:  # noqa: B027 (most kinds: nothing)
        """A run ended and its end is committed (the finalize task): the kind's own follow-up
        (a job's end notice)."""


class OneNameDriver(Driver):
    """A kind whose objects keep one name across its runs (the same address, the same
    workspace): started and stopped in place, and deleted before its row (DELETING).
    `backend_kind` names the backend's methods (`observe_<it>`, `delete_<it>`); `states` is
    the kind's states of an observation (`targets`)."""

    backend_kind: str
    states: Callable[[Workload, ObservedWorkload], list[tuple[str, str]]]

    def __init_subclass__(
        cls,
        backend_kind: str = "",
        states: Callable[[Workload, ObservedWorkload], list[tuple[str, str]]] | None = None,
        **kwargs: object,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if backend_kind:
            cls.backend_kind = backend_kind
        if states is not None:
            cls.states = staticmethod(states)  # type: ignore[assignment]

    @abstractmethod
    def apply(self, workload: Workload) -> ObservedWorkload:
        """Create or update its objects, running or stopped as the row says."""

    def observe(self, workload: Workload) -> ObservedWorkload:
        read: Callable[..., ObservedWorkload]
        read = getattr(get_backend(), f"observe_{self.backend_kind}")
        return read(ref=job_ref(workload))

    def targets(self, workload: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
        return self.states(workload, observed)

    def delete_objects(self, ref: WorkloadRef) -> None:
        getattr(get_backend(), f"delete_{self.backend_kind}")(ref=ref)

    def drive(self, workload: Workload) -> ObservedWorkload | None:
        if workload.state == DELETING:
            self.delete_objects(job_ref(workload))
            if self.observe(workload).phase is Phase.GONE:
                end_runs(workload)
                project_id, workload_id = workload.project_id, workload.pk
                workload.delete()  # its runs stay, for billing
                channels.workload_changed(
                    project_id=project_id, workload_id=workload_id, what="deleted"
                )
            return None
        ensure_project(workload.project)
        if not workload.stop_requested:
            record_launch(workload)
        return self.apply(workload)

    def orphans(self, observations: list[ObservedWorkload]) -> int:
        """Its objects outlive its stops, not its row: those left running by a row that
        says otherwise are stopped (`left_running`). Those of a row that is gone (a deleted
        one's, a restored dump's) are orphans.py's: stopped after a grace, their workspace
        deleted after a day or more."""
        seen = settled(observations)
        rows, acted = rows_of(seen), 0
        for observed in seen:
            row = rows.get(observed.id)
            if row is None or unknown(observed, row) or not self.left_running(row, observed):
                continue
            acted += 1
            if acted == ORPHANS_PER_SWEEP:
                break
        return acted

    def left_running(self, row: Workload, observed: ObservedWorkload) -> bool:
        """Whether the objects of a row that is still there must be stopped (stopping them
        if so): none by default."""
        return False


def settled_state(state: str, reason: str, stopped: str) -> list[tuple[str, str]]:
    """A one-name kind's state of an observation: its `stopped` state reads "stopped" where
    the backend gives no reason."""
    return [(state, reason or "stopped" if state == stopped else reason)]
