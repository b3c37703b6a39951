"""The issue's resume proof through the emulator's Kueue (QUEUE_ENGINE=kueue), with a real tiny
fine-tune on CPU as the evicted pod's container: beta's preemptible fine-tune borrows alpha's
GPU; alpha reclaims it, Kueue evicts it (Evicted, the pod deleted: the test, as the kubelet,
sends the process SIGTERM), the preset saves a checkpoint and exits 143, the job is QUEUED with
Kueue's reason; alpha's job ends, Kueue admits beta's again, and the new pod's process resumes
from that checkpoint and ends at the same step as an uninterrupted run, its loss within 1 %.

The test plays the kubelet and the volume sync: each pod's container runs the argv the panel
put in the Job's pod template (its `/workspace` mapped to a directory of that pod), its lines
are the pod's log, and what the evicted pod wrote under `/workspace/output` is what the next
pod's pull finds (the push sidecar's part, proven by the storage tests)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.logs import collect_logs
from controlpanel.engine.models import JobEvent, JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.jobs.presets import finetune_command
from controlpanel.jobs.services import job_submit
from controlpanel.projects.models import Project
from controlpanel.queues.services import queues_reconcile
from deploy import names
from tests.fixtures.jobs import access_for, project_bucket, put_dataset, submit
from tests.fixtures.k8s import kueue_on
from tests.fixtures.llm import REPO, TinyLLM, finetune_env, parse_output
from tests.training.ranks import Hold, losses, read_until

pytestmark = [pytest.mark.slow, pytest.mark.k8s, pytest.mark.django_db(transaction=True)]

PARAMS = {
    "max_steps": 12,
    "batch_size": 2,
    "max_length": 128,
    "log_steps": 1,
    "save_steps": 3,
    "learning_rate": 5e-3,
    "warmup_steps": 1,
    "seed": 3,
}


@pytest.fixture
def cohort(
    k8s_cluster: Any, k8s_jobs: Any, settings: Any, project: Project, other_project: Project
) -> Any:
    kueue = kueue_on(k8s_cluster, settings)
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=1)
    assert queues_reconcile() == ["ajuste-alpha", "ajuste-beta"]
    return kueue


def pod_of(cluster: Any, job: Job, *, live: bool = True) -> dict[str, Any]:
    pods = cluster.pods_of(job.project.namespace, names.job_name(job_ref(job)))
    if live:
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    [pod] = pods
    return pod


def launch(cluster: Any, job: Job) -> dict[str, Any]:
    """The panel hands the job to Kueue, Kueue admits it, its pod runs."""
    admit_jobs(project_id=job.project_id)
    reconcile(str(job.pk))
    pod = pod_of(cluster, job)
    cluster.kubelet.run(job.project.namespace, pod["metadata"]["name"])
    sweep_now()
    return pod


def workspace(root: Path, tiny_llm: TinyLLM) -> Path:
    """A pod's /workspace: the model and the data pulled, an empty output."""
    shutil.copytree(tiny_llm.model_dir, root / "model")
    (root / "data").mkdir(parents=True)
    shutil.copy(tiny_llm.messages, root / "data" / "train.jsonl")
    (root / "output").mkdir()
    return root


def container(pod: dict[str, Any], root: Path, env: dict[str, str] | None = None) -> Any:
    """The pod's main container as a process here: the Job's argv, /workspace mapped."""
    [main] = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    argv = [*(main.get("command") or []), *(main.get("args") or [])]
    assert argv[:3] == ["python", "-m", "training.finetune"], argv
    argv = [a.replace("/workspace", str(root)) for a in argv]
    return subprocess.Popen(
        [sys.executable, *argv[1:]],
        cwd=REPO,
        env={**finetune_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def log(cluster: Any, pod: dict[str, Any], lines: list[str]) -> None:
    meta = pod["metadata"]
    cluster.kubelet.log(meta["namespace"], meta["name"], *(x.rstrip("\n") for x in lines))


def test_an_evicted_fine_tune_resumes_from_its_checkpoint_as_if_never_evicted(
    k8s_cluster: Any,
    cohort: Any,
    project: Project,
    other_project: Project,
    owner: Any,
    panel_s3: Any,
    tiny_llm: TinyLLM,
    tmp_path: Path,
) -> None:
    bucket = project_bucket(other_project, panel_s3)
    put_dataset(panel_s3, bucket.name)
    volumes = [
        f"{bucket.name}@LOCAL/model:/workspace/model",
        f"{bucket.name}@LOCAL/chat:/workspace/data",
        f"{bucket.name}@LOCAL/runs:/workspace/output:rw",
    ]
    reference = container_reference(tiny_llm, tmp_path)  # uninterrupted, side by side
    batch = submit(other_project, owner, name="beta-batch")  # beta's own GPU, batch priority
    launch(k8s_cluster, batch)
    tune = job_submit(
        access=access_for(other_project),
        user=owner,
        data={
            "preset": "finetune",
            "flavor": "h100-1-gpu",
            "gpu": 1,
            "params": PARAMS,
            "volumes": volumes,
            "name": "beta-tune",
        },
    )
    assert tune.preemptible
    first_pod = launch(k8s_cluster, tune)  # on alpha's idle GPU, borrowed
    assert Job.objects.get(pk=tune.pk).state == "RUNNING"

    first = workspace(tmp_path / "pod-1", tiny_llm)
    hold = Hold(tmp_path, "checkpoint", 6)
    proc = container(first_pod, first, hold.env)
    before = read_until(proc, "checkpoint", 6)  # the writer waits right after its checkpoint
    log(k8s_cluster, first_pod, before)

    # Alpha reclaims its GPU: Kueue evicts beta's preemptible fine-tune (lowest priority).
    k8s_cluster.kubelet.ignore_sigterm = True  # the pod terminates as long as its process runs
    alpha = submit(project, owner, name="alpha-0")
    admit_jobs(project_id=project.pk)
    reconcile(str(alpha.pk))
    sweep_now()
    tune.refresh_from_db()
    assert tune.state == "QUEUED" and tune.state_reason.startswith("preempted: "), tune.state_reason
    assert Job.objects.get(pk=batch.pk).state == "RUNNING"
    dying = pod_of(k8s_cluster, tune, live=False)
    assert dying["metadata"]["deletionTimestamp"]
    saving = JobRun.objects.get(uid=first_pod["metadata"]["uid"])
    assert saving.finished_at is None  # still on its GPU, saving: metered until it ends
    proc.send_signal(signal.SIGTERM)  # the kubelet's SIGTERM
    hold.release()
    rest, _ = proc.communicate(timeout=300)
    evicted = parse_output(proc.returncode, "".join(before) + rest, "")
    log(k8s_cluster, first_pod, rest.splitlines())
    assert evicted.returncode == 143, "\n".join(evicted.lines[-30:])
    assert [e["step"] for e in evicted.of("interrupted")] == [6]
    collect_logs(job_id=tune.pk)
    k8s_cluster.kubelet.stop(other_project.namespace, first_pod["metadata"]["name"], 143)
    sweep_now()  # the GPU is free: alpha's job runs

    # Alpha's job ends: Kueue admits beta's fine-tune again, a new pod of the same run.
    reconcile(str(alpha.pk))
    alpha_pod = pod_of(k8s_cluster, alpha)
    k8s_cluster.kubelet.run(project.namespace, alpha_pod["metadata"]["name"])
    sweep_now()
    assert Job.objects.get(pk=alpha.pk).state == "RUNNING"
    k8s_cluster.kubelet.finish(project.namespace, alpha_pod["metadata"]["name"])
    sweep_now()
    second_pod = launch(k8s_cluster, tune)
    assert second_pod["metadata"]["uid"] != first_pod["metadata"]["uid"]
    second = workspace(tmp_path / "pod-2", tiny_llm)
    shutil.rmtree(second / "output")
    shutil.copytree(first / "output", second / "output")  # pushed by the first, pulled here
    resumed_proc = container(second_pod, second)
    out, _ = resumed_proc.communicate(timeout=300)
    resumed = parse_output(resumed_proc.returncode, out, "")
    log(k8s_cluster, second_pod, out.splitlines())
    assert resumed.returncode == 0, "\n".join(resumed.lines[-30:])
    collect_logs(job_id=tune.pk)

    one = reference_result(reference)
    assert resumed.of("start")[0]["resumed_from_step"] == 6
    assert [e["step"] for e in resumed.of("progress")] == list(range(7, 13))
    assert resumed.of("done")[0]["step"] == one.of("done")[0]["step"] == 12
    assert losses(resumed)[12] == pytest.approx(losses(one)[12], rel=0.01)
    assert {**losses(evicted), **losses(resumed)} == pytest.approx(losses(one), abs=1e-3)

    said = list(
        JobEvent.objects.filter(job_id=tune.pk, reason__contains="at step")
        .order_by("pk")
        .values_list("reason", flat=True)
    ) + list(
        JobEvent.objects.filter(job_id=tune.pk, reason__startswith="resumed from").values_list(
            "reason", flat=True
        )
    )
    assert said[0].startswith("evicted by Kueue (preempted: "), said
    assert said[0].endswith("at step 6: its checkpoint is saved"), said
    assert said[1:] == ["resumed from step 6"], said
    runs = list(JobRun.objects.filter(job_id=tune.pk).order_by("started_at"))
    assert len(runs) == 2 and runs[0].finished_at is not None
    assert runs[1].started_at is not None and runs[1].started_at >= runs[0].finished_at


def container_reference(tiny_llm: TinyLLM, tmp_path: Path) -> Any:
    """The same fine-tune uninterrupted (the preset's argv with these params)."""
    root = workspace(tmp_path / "reference", tiny_llm)
    argv = [a.replace("/workspace", str(root)) for a in finetune_command(params=PARAMS)]
    return subprocess.Popen(
        [sys.executable, *argv[1:]],
        cwd=REPO,
        env=finetune_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def reference_result(proc: Any) -> Any:
    out, _ = proc.communicate(timeout=300)
    result = parse_output(proc.returncode, out, "")
    assert result.returncode == 0, "\n".join(result.lines[-30:])
    return result
