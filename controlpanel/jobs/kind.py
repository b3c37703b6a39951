"""What the engine needs of a job (controlpanel/engine/registry.py): it runs its command once,
and again on "run again" (a new run with objects of its own), and ends."""

from __future__ import annotations

from controlpanel.engine.registry import KindSpec
from controlpanel.jobs.states import JobState as S

FINAL = frozenset({S.DONE, S.INTERRUPTED, S.FAILED, S.ERROR, S.SYNC_FAILED})

KIND = KindSpec(
    name="job",
    states=S,
    final=FINAL,
    waiting=S.QUEUED,
    failures=frozenset({S.FAILED, S.ERROR, S.SYNC_FAILED}),
    # PENDING and INITIALIZING share a rank: the pull runs after scheduling, and the user's
    # image is pulled after it.
    ranks={
        S.QUEUED: 0,
        S.PENDING: 1,
        S.INITIALIZING: 1,
        S.RUNNING: 2,
        S.INTERRUPTING: 3,
        S.TIMEOUT: 3,
        S.FINALIZING: 3,
        **dict.fromkeys(FINAL, 4),
    },
    printing=frozenset({S.RUNNING, S.INTERRUPTING, S.TIMEOUT, S.FINALIZING}),
    start_reason="run {run} requested by {user}",
    start_refusal="Only a finished job can be run again; stop it first.",
    stoppable=frozenset(set(S) - FINAL),
    stopping=S.INTERRUPTING,
    stopped=S.INTERRUPTED,
    stop_reason="stop requested by {user}",
    stop_refusal="The job already ended ({state}).",
    deletable=FINAL,
    delete_refusal="Stop the job before deleting it.",
    run_claim=True,
    claim_kept=frozenset({S.SYNC_FAILED, S.ERROR}),
    claim_released=frozenset({S.DONE, S.FAILED, S.INTERRUPTED}),
    progress_events=True,
    judged_by_ends=True,
    gpu_idle="choice",  # warned only, or stopped, as its project chooses
    model_path="controlpanel.jobs.models.Job",
    driver_path="controlpanel.jobs.driver.DRIVER",
    chores={"notices_resent": "controlpanel.jobs.tasks.notices_resend"},
)
