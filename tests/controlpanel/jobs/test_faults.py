"""The fault suite: real Celery worker, beat and watcher processes on a PostgreSQL and a Redis of
the test's own (tests/fixtures/faults.py), jobs on the Kubernetes emulator, and one fault per
scenario: a worker SIGKILLed inside a reconcile and inside a finalize, Redis restarted with
tasks queued, PostgreSQL restarted, the API server answering 409, 410, 413, 500 or not
answering in time, the watcher killed mid-stream.

Each scenario submits a few one-GPU jobs to a project whose GPU quota is 1, injects its fault,
plays the nodes (the emulator's kubelet runs each pod, prints lines, ends it) until every job
is over, then checks what must hold whatever happened (`check_invariants`): each job is in the
state its pod's end calls for; no Job and no pod was ever created twice for one run; at no
moment were more GPUs admitted than the quota; each pod run has one JobRun with its start and
end, one RUNNING and one final event; the stored log is exactly what the kubelet printed, seq
1..N.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections

from controlpanel.engine import logs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.models import FINAL_STATES, LIVE_STATES, JobEvent, JobRun
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from tests.fixtures.faults import PrivateServices
from tests.fixtures.jobs import submit
from tests.fixtures.processes import Processes, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.k8s,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_services"),
]
NS = "ajuste-alpha"
QUOTA = 1
S = JobState
SETTLE_S = 60  # every scenario's jobs end well within this once the fault is over
REQUEST_TIMEOUT_S = 2  # the processes' Kubernetes API call timeout (the time-out scenario)
# What a Celery worker's Kubernetes client says it is (deploy/kubernetes/client.py): its
# requests told from the watcher's and its log collector's (User-Agent `(watch_workloads)`).
WORKER_AGENT = "(celery-worker)"


@pytest.fixture
def cluster_env(k8s_cluster: Any, k8s_jobs: Any, panel_s3: Any) -> dict[str, str]:
    return {
        "COMPUTE_BACKEND": "kubernetes",
        "KUBECONFIG": k8s_cluster.kubeconfig,  # its server and bearer token
        "KUBERNETES_REQUEST_TIMEOUT_SECONDS": str(REQUEST_TIMEOUT_S),
        # A finalize lost with its worker or its broker is sent again by the next sweep.
        "JOB_FINALIZE_GRACE_SECONDS": "3",
        # ...and a sweep killed with its worker does not hold the next ones for long.
        "JOB_SWEEP_LOCK_SECONDS": "5",
        "S3_ENDPOINT_URL": panel_s3.endpoint_url,
        "S3_ACCESS_KEY": panel_s3.access_key,
        "S3_SECRET_KEY": panel_s3.secret_key,
        "S3_ALIAS": "LOCAL",
    }


@pytest.fixture
def quota_project(project: Project) -> Project:
    project.gpu_quota = QUOTA
    project.save(update_fields=["gpu_quota"])
    return project


def _db_retry(read: Callable[[], Any], default: Any) -> Any:
    """A read that survives the database going away (the restart scenario): `default`."""
    try:
        return read()
    except DatabaseError:
        connection.close()
        return default


class Sampler(threading.Thread):
    """Samples, as often as it can, the GPUs admitted in the project (database) and the pods
    alive in the cluster: neither may ever exceed the quota."""

    def __init__(self, project: Project, cluster: Any) -> None:
        super().__init__(daemon=True, name="quota-sampler")
        self.project_id = project.pk
        self.cluster = cluster
        self.stop = threading.Event()
        self.max_admitted = 0
        self.max_pods = 0
        self.samples = 0

    def run(self) -> None:
        try:
            while not self.stop.wait(0.05):
                admitted = _db_retry(self._admitted, None)
                if admitted is not None:
                    self.max_admitted = max(self.max_admitted, admitted)
                    self.samples += 1
                self.max_pods = max(self.max_pods, self._live_pods())
        finally:
            connection.close()

    def _admitted(self) -> int:
        jobs = Job.objects.filter(project_id=self.project_id, state__in=LIVE_STATES).exclude(
            admitted_at=None
        )
        return sum(job.gpus for job in jobs.select_related("flavor"))

    def _live_pods(self) -> int:
        return sum(
            1
            for pod in self.cluster.list("pods", NS)
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )


@dataclass
class Plan:
    """What the node does with a job's pod, and the state that must follow."""

    exit_code: int = 0
    expected: str = S.DONE
    runs: bool = True  # False: the job never gets a pod (refused by the API server)


@dataclass
class Scenario:
    """The jobs of one scenario and the test's kubelet over them: each pod is run, prints its
    first lines, and once the panel recorded it RUNNING (or as `finish_when` says) prints the
    rest and exits with its plan's code."""

    cluster: Any
    procs: Processes
    jobs: list[Job]
    plans: dict[str, Plan]
    printed: dict[str, list[str]] = field(default_factory=dict)
    stage: dict[str, int] = field(default_factory=dict)
    finish_when: Callable[[Job, str], bool] | None = None
    restarted: list[str] = field(default_factory=list)

    def job_name(self, job: Job) -> str:
        return names.job_name(job_ref(job))

    def pods(self, job: Job) -> list[Any]:
        return self.cluster.pods_of(NS, self.job_name(job))

    def supervise(self) -> None:
        """Start again a process that exited on its own, as Kubernetes restarts a crashed
        container (k8s/*.yaml); each restart is noted in the report."""
        for name, proc in list(self.procs.procs.items()):
            if proc.poll() is None:
                continue
            self.restarted.append(f"{name} (exit {proc.returncode})")
            if name.startswith("worker"):
                self.procs.worker(name)
            elif name == "beat":
                self.procs.beat()
            else:
                self.procs.watcher()

    def step(self) -> None:
        self.supervise()
        kubelet = self.cluster.kubelet
        for job in self.jobs:
            key = str(job.pk)
            for pod in self.pods(job):
                name = pod["metadata"]["name"]
                stage = self.stage.get(name, 0)
                lines = self.printed.setdefault(key, [])
                if stage == 0:
                    kubelet.run(NS, name)
                    first = [f"{job.short_id} loading", f"{job.short_id} step 1 loss 2.0"]
                    kubelet.log(NS, name, *first)
                    lines.extend(first)
                    self.stage[name] = 1
                elif stage == 1 and self._may_finish(job, name):
                    rest = [f"{job.short_id} step 2 loss 1.5", f"{job.short_id} saved"]
                    kubelet.log(NS, name, *rest)
                    lines.extend(rest)
                    kubelet.finish(NS, name, exit_code=self.plans[key].exit_code)
                    self.stage[name] = 2

    def _may_finish(self, job: Job, pod: str) -> bool:
        """Once the panel recorded this run RUNNING (`drive`'s deadline fails a scenario
        whose panel never does)."""
        if self.finish_when is not None:
            return self.finish_when(job, pod)
        return bool(_db_retry(lambda: recorded_running(job), False))

    def settled(self) -> bool:
        def read() -> bool:
            rows = Job.objects.filter(pk__in=[j.pk for j in self.jobs])
            return all(j.state in FINAL_STATES and j.logs_archived for j in rows)

        return bool(_db_retry(read, False))

    def drive(self, until: Callable[[], Any], seconds: float, what: str) -> Any:
        """Play the nodes until `until()` holds (polled, with a deadline)."""

        def once() -> Any:
            self.step()
            return until()

        return wait_for(once, seconds, what, self.procs)

    def run_to_the_end(self, seconds: float = SETTLE_S) -> None:
        try:
            self.drive(self.settled, seconds, "every job ended with its log archived")
        except AssertionError:
            raise AssertionError(f"not every job ended:\n{self.report()}") from None

    def report(self) -> str:
        """Where each job is, and what the processes said (less the routine lines)."""
        rows = Job.objects.filter(pk__in=[j.pk for j in self.jobs]).order_by("name")
        jobs = [
            f"{j.name}: {j.state} ({j.state_reason}) launched {j.launched_run} "
            f"archived {j.logs_archived} lines {j.log_lines}"
            for j in rows
        ]
        restarts = [f"restarted after exiting on their own: {', '.join(self.restarted)}"]
        said = [
            line
            for line in self.procs.logs().splitlines()
            if "jobs_sweep[" not in line and not line.endswith("received")
        ]
        return "\n".join(jobs + restarts + said[-80:])


def state_of(job: Job) -> str:
    return str(Job.objects.values_list("state", flat=True).get(pk=job.pk))


def recorded_running(job: Job) -> bool:
    """The panel's RUNNING event for the job's current run is stored."""
    run = Job.objects.values_list("run", flat=True).get(pk=job.pk)
    return JobEvent.objects.filter(job_id=job.pk, run=run, state=S.RUNNING).exists()


@pytest.fixture
def fault_processes(processes: Any) -> Iterator[Callable[[dict[str, str]], Processes]]:
    """`processes`, SIGKILLed at the end: the scenarios are over, no shutdown is awaited."""
    made: list[Processes] = []

    def make(env: dict[str, str]) -> Processes:
        procs: Processes = processes(env)
        made.append(procs)
        return procs

    yield make
    for procs in made:
        for name in list(procs.procs):
            if procs.procs[name].poll() is None:
                procs.kill(name)


def start(
    processes: Any,
    env: dict[str, str],
    *,
    worker: bool = True,
    beat: bool = True,
    watcher: bool = True,
) -> Processes:
    procs: Processes = processes(env)
    if worker:
        procs.worker("worker-1")
    if beat:
        procs.beat()
    if watcher:
        procs.watcher()
    return procs


def submit_jobs(project: Project, owner: Any, count: int) -> list[Job]:
    return [submit(project, owner, name=f"job-{i}", flavor="l4-1-gpu", gpu=1) for i in range(count)]


def check_invariants(scenario: Scenario, sampler: Sampler) -> None:
    """Everything the fault must not have broken; every broken rule is reported at once."""
    problems: list[str] = []
    created_jobs = scenario.cluster.created("jobs", NS)
    created_pods = scenario.cluster.created("pods", NS)
    intervals: list[tuple[Any, Any, int]] = []
    for job in scenario.jobs:
        job.refresh_from_db()
        key, plan, jname = str(job.pk), scenario.plans[str(job.pk)], scenario.job_name(job)
        where = f"job {job.name} ({job.short_id})"
        if job.state != plan.expected:
            problems.append(f"{where}: {job.state} ({job.state_reason}), not {plan.expected}")
        made = [o for o in created_jobs if o["metadata"]["name"] == jname]
        pods = [
            o for o in created_pods if (o["metadata"].get("labels") or {}).get("job-name") == jname
        ]
        if len(made) != (1 if plan.runs else 0) or len(pods) != (1 if plan.runs else 0):
            problems.append(f"{where}: {len(made)} Job(s) and {len(pods)} pod(s) created")
        events = list(JobEvent.objects.filter(job=job, run=job.run).order_by("at", "pk"))
        finals = [e for e in events if e.state in FINAL_STATES]
        running = [e for e in events if e.state == S.RUNNING]
        if len(finals) != 1 or events[-1].state != job.state:
            problems.append(f"{where}: final events {[(e.state, e.reason) for e in finals]}")
        if len(running) != (1 if plan.runs else 0):
            problems.append(f"{where}: {len(running)} RUNNING events")
        runs = list(JobRun.objects.filter(job=job))
        uids = {o["metadata"]["uid"] for o in pods}
        if {r.uid for r in runs} != uids:
            problems.append(f"{where}: JobRuns {[r.uid for r in runs]} for pods {sorted(uids)}")
        for r in runs:
            if r.started_at is None or r.finished_at is None or r.exit_code != plan.exit_code:
                problems.append(
                    f"{where}: JobRun {r.uid} start {r.started_at} end {r.finished_at} "
                    f"exit {r.exit_code}"
                )
        if plan.runs and (job.started_at is None or job.finished_at is None):
            problems.append(f"{where}: started_at {job.started_at} finished_at {job.finished_at}")
        # Through the log's reader: an ended log has moved to object storage (#26).
        stored = [(ln.seq, ln.text) for ln in logs.lines_after(job=job, after=0, limit=100_000)]
        printed = scenario.printed.get(key, [])
        if [s for s, _ in stored] != list(range(1, len(stored) + 1)):
            problems.append(f"{where}: log seqs {[s for s, _ in stored]}")
        if [t for _, t in stored] != printed or job.log_lines != len(printed):
            problems.append(
                f"{where}: log {[t for _, t in stored]} (count {job.log_lines}), printed {printed}"
            )
        if not job.logs_archived:
            problems.append(f"{where}: log not archived")
        if job.admitted_at is not None and finals:
            intervals.append((job.admitted_at, finals[0].at, job.gpus))
    problems += _overlaps(intervals)
    if sampler.max_admitted > QUOTA or sampler.max_pods > QUOTA:
        problems.append(
            f"quota {QUOTA}: sampled {sampler.max_admitted} GPUs admitted and "
            f"{sampler.max_pods} pods alive at once ({sampler.samples} samples)"
        )
    assert sampler.samples > 0, "the quota was never sampled"
    assert not problems, "\n".join(problems) + "\n" + scenario.report()


def _overlaps(intervals: list[tuple[Any, Any, int]]) -> list[str]:
    """From the rows' own times: GPUs held from admission to the final event, never more
    than the quota at once."""
    points = sorted(
        [(start, 1, gpus) for start, _, gpus in intervals]
        + [(end, 0, -gpus) for _, end, gpus in intervals]  # an end before a start at a tie
    )
    held, problems = 0, []
    for at, _, delta in points:
        held += delta
        if held > QUOTA:
            problems.append(f"timeline: {held} GPUs admitted at {at.isoformat()}")
    return problems


@pytest.fixture
def sampler(quota_project: Project, k8s_cluster: Any) -> Any:
    thread = Sampler(quota_project, k8s_cluster)
    thread.start()
    yield thread
    thread.stop.set()
    thread.join(10)


def plans_for(jobs: list[Job], **special: Plan) -> dict[str, Plan]:
    """Every job exits 0 (DONE) unless `special` (by job name) says otherwise."""
    return {str(job.pk): special.get(job.name, Plan()) for job in jobs}


def test_worker_killed_inside_a_reconcile(
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
) -> None:
    """SIGKILL while the worker waits on the Job's create (its transaction open, the row
    locked); the create then reaches the API server all the same. The next worker and the
    sweep must adopt that Job, not make a second one."""
    hold = k8s_cluster.hold_next("POST", "jobs", apply_first=True)
    procs = start(fault_processes, cluster_env)
    jobs = submit_jobs(quota_project, owner, 3)
    assert hold.wait_arrived(60), procs.logs()[-4000:]
    procs.kill("worker-1")
    hold.release()
    assert len(k8s_cluster.created("jobs", NS)) == 1  # made, but its worker never knew
    procs.worker("worker-2")
    scenario = Scenario(
        k8s_cluster, procs, jobs, plans_for(jobs, **{"job-1": Plan(exit_code=1, expected=S.FAILED)})
    )
    scenario.run_to_the_end()
    check_invariants(scenario, sampler)


def test_worker_killed_inside_a_finalize(
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
) -> None:
    """SIGKILL while job_finalize reads the end of the log (after it claimed the notice):
    the log is still archived whole, once, and the next job is admitted."""
    procs = start(fault_processes, cluster_env)
    jobs = submit_jobs(quota_project, owner, 2)
    scenario = Scenario(k8s_cluster, procs, jobs, plans_for(jobs))
    first = jobs[0]

    def finish_first(job: Job, pod: str) -> bool:
        if job.pk != first.pk:
            return True
        if state_of(job) != S.RUNNING:
            return False
        # The worker pauses; the watcher records the end and queues the finalize meanwhile.
        os.killpg(procs.procs["worker-1"].pid, 19)  # SIGSTOP
        return True

    scenario.finish_when = finish_first
    scenario.drive(lambda: state_of(first) == S.DONE, 30, "the first job DONE")
    # The worker's next log read is the finalize's (the collector reads from the watcher).
    hold = k8s_cluster.hold_next("GET", "pods/log", agent=WORKER_AGENT)
    os.killpg(procs.procs["worker-1"].pid, 18)  # SIGCONT: the finalize runs into the hold
    assert hold.wait_arrived(30), procs.logs()[-4000:]
    procs.kill("worker-1")
    hold.release()
    first.refresh_from_db()
    assert first.notified_run == first.run and not first.logs_archived  # killed mid-finalize
    procs.worker("worker-2")
    scenario.finish_when = None
    scenario.run_to_the_end()
    check_invariants(scenario, sampler)


def test_redis_restarted_with_tasks_queued(
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
    private_services: PrivateServices,
) -> None:
    """Jobs submitted while no worker runs (their admissions wait in Redis), then Redis
    restarts and loses them; later Redis restarts again under a running job. The beat's sweep
    must find the waiting jobs again, and worker, beat and watcher reconnect."""
    procs = start(fault_processes, cluster_env, worker=False)
    jobs = submit_jobs(quota_project, owner, 3)
    private_services.redis.restart()
    procs.worker("worker-1")
    scenario = Scenario(k8s_cluster, procs, jobs, plans_for(jobs))
    scenario.drive(lambda: state_of(jobs[1]) == S.RUNNING, 60, "the second job RUNNING")
    private_services.redis.restart()
    scenario.run_to_the_end()
    check_invariants(scenario, sampler)


def test_postgresql_restarted(
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
    private_services: PrivateServices,
) -> None:
    """PostgreSQL restarts while a job runs; its pod ends while the database is down (the
    watcher sees it then), and the next job's admission is due at that moment."""
    procs = start(fault_processes, cluster_env)
    jobs = submit_jobs(quota_project, owner, 3)
    scenario = Scenario(k8s_cluster, procs, jobs, plans_for(jobs))
    first = jobs[0]

    def never(job: Job, pod: str) -> bool:
        return job.pk != first.pk

    scenario.finish_when = never
    scenario.drive(lambda: state_of(first) == S.RUNNING, 60, "the first job RUNNING")
    pod = scenario.pods(first)[0]["metadata"]["name"]
    said = Said(procs)
    private_services.postgres.stop()
    k8s_cluster.kubelet.log(NS, pod, f"{first.short_id} last words")
    scenario.printed[str(first.pk)].append(f"{first.short_id} last words")
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    scenario.stage[pod] = 2
    # The database stays down until the watcher failed to record the pod's end and a sweep
    # failed on it too.
    wait_for(
        lambda: (
            said("watcher", f"recording {first.pk} failed")
            and said("worker-1", "jobs_sweep[", "raised unexpected")
        ),
        60,
        "the watcher and a sweep failing on the stopped database",
        procs,
    )
    private_services.postgres.start()
    connections.close_all()
    scenario.finish_when = None
    scenario.run_to_the_end()
    check_invariants(scenario, sampler)


class Said:
    """What the processes wrote to their logs since this was made."""

    def __init__(self, procs: Processes) -> None:
        self.dir = procs.log_dir
        self.start = {p.stem: p.stat().st_size for p in self.dir.glob("*.log")}

    def __call__(self, name: str, *parts: str) -> bool:
        """Whether process `name` wrote a line holding every one of `parts`."""
        with (self.dir / f"{name}.log").open("rb") as log:
            log.seek(self.start.get(name, 0))
            text = log.read().decode(errors="replace")
        return any(all(part in line for part in parts) for line in text.splitlines())


@pytest.mark.parametrize("status", [409, 413, 500])
def test_api_server_answers(
    status: int,
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
) -> None:
    """The first job's create is answered `status` (409: "already exists" though it does not;
    413: too large, refused for good; 500 five times: more than one call's retries), and three
    log reads fail with 500 (a GET is never answered 409 or 413)."""
    procs = start(fault_processes, cluster_env)
    creates = k8s_cluster.fail_next("POST", "jobs", status=status, times=5 if status == 500 else 1)
    reads = k8s_cluster.fail_next("GET", "pods/log", status=500, times=3)
    jobs = submit_jobs(quota_project, owner, 3)
    special = {"job-0": Plan(runs=False, expected=S.ERROR)} if status == 413 else {}
    scenario = Scenario(k8s_cluster, procs, jobs, plans_for(jobs, **special))
    scenario.run_to_the_end()
    # Every injected answer was served (a scenario without its fault proves nothing).
    assert (creates.served, reads.served) == (5 if status == 500 else 1, 3)
    if status == 413:
        assert "injected HTTP 413" in Job.objects.get(pk=jobs[0].pk).state_reason
    check_invariants(scenario, sampler)


def test_api_server_times_out(
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
) -> None:
    """The first create hangs past the client's timeout and is then applied anyway (the
    retried create finds it); a log read hangs too."""
    procs = start(fault_processes, cluster_env)
    create = k8s_cluster.hold_next(
        "POST", "jobs", seconds=REQUEST_TIMEOUT_S + 1.5, apply_first=True
    )
    read = k8s_cluster.hold_next("GET", "pods/log", seconds=REQUEST_TIMEOUT_S + 1.5)
    jobs = submit_jobs(quota_project, owner, 2)
    scenario = Scenario(k8s_cluster, procs, jobs, plans_for(jobs))
    scenario.run_to_the_end()
    assert create.arrived.is_set() and read.arrived.is_set()
    check_invariants(scenario, sampler)


def test_watch_expired_and_watcher_killed(
    fault_processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    quota_project: Project,
    owner: Any,
    sampler: Sampler,
) -> None:
    """The watch expires (410 Gone: the watcher relists) while the first job runs; then the
    watcher is SIGKILLed mid-stream while the second runs, its log half collected: the sweep
    alone moves the jobs on, the finalize archives the rest of the log, and a new watcher
    takes over for the third."""
    procs = start(fault_processes, cluster_env)
    jobs = submit_jobs(quota_project, owner, 3)
    scenario = Scenario(k8s_cluster, procs, jobs, plans_for(jobs))
    scenario.drive(lambda: state_of(jobs[0]) == S.RUNNING, 60, "the first job RUNNING")
    k8s_cluster.compact()
    gone = k8s_cluster.fail_next("GET", "pods", status=410)  # and the relist's watch too
    scenario.drive(lambda: state_of(jobs[1]) == S.RUNNING, 60, "the second job RUNNING")
    # Both 410s reached the watcher: the expired watch's ERROR event, then the injected one.
    assert k8s_cluster.watches.expired >= 1 and gone.served == 1
    wait_for(lambda: Job.objects.get(pk=jobs[1].pk).log_lines >= 1, 20, "a line collected", procs)
    procs.kill("watcher")
    scenario.drive(lambda: state_of(jobs[2]) == S.RUNNING, 60, "the third job RUNNING")
    procs.watcher()
    scenario.run_to_the_end()
    check_invariants(scenario, sampler)
