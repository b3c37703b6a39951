"""How a job run is stopped: a deadline of one second on its Job (the Job controller ends the
pod gracefully), and no pod at all for a Job Kueue still holds suspended."""

from __future__ import annotations

from datetime import UTC, datetime

from deploy import names
from deploy.kubernetes.api import Obj
from deploy.types import Phase

STOPPABLE = frozenset({Phase.QUEUED, Phase.PENDING, Phase.INITIALIZING, Phase.RUNNING})
STOP_ATTEMPTS = 3


def stop_patch(job: Obj, *, now: datetime | None = None) -> Obj:
    """The merge patch that stops `job`. For a suspended Job it names the resourceVersion it
    was decided on: if Kueue unsuspends the Job meanwhile, the API server answers 409."""
    at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch: Obj = {
        "metadata": {"annotations": {names.STOP_REQUESTED: at}},
        "spec": {"activeDeadlineSeconds": 1},
    }
    if (job.get("spec") or {}).get("suspend"):
        patch["metadata"]["resourceVersion"] = job["metadata"]["resourceVersion"]
        patch["spec"]["parallelism"] = 0  # the Job controller creates no pod, ever
    return patch
