"""The first-run demo journey on the local backend, with real processes: the fine-tune preset
on the tiny model, volumes pulled from and pushed to the S3 server, logs archived."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlpanel.engine import logs
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.reconcile import observe, reconcile
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from storage.objects import iter_objects
from storage.sync import push
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.jobs import project_bucket, submit
from training.demo import make_demo_assets

TINY = {"max_steps": 4, "save_steps": 2, "batch_size": 2, "max_length": 96}


def upload_dir(s3: Any, bucket: str, prefix: str, directory: Path) -> None:
    spec = VolumeSpec(
        bucket=bucket, alias="LOCAL", prefix=prefix, mount_path="/workspace/x", mode=Mode.RW
    )
    stats = push(s3, spec, directory)
    assert stats.failed == 0


def wait_final(job: Job, seconds: float = 240) -> Job:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        observe(str(job.pk))
        job.refresh_from_db()
        if job.is_final:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job still {job.state}: {job.state_reason}")


@pytest.fixture
def demo_volumes(project: Project, panel_s3: Any, tmp_path: Path) -> dict[str, str]:
    assets = make_demo_assets(tmp_path / "demo", examples=24)
    models = project_bucket(project, panel_s3).name
    out = project_bucket(project, panel_s3).name
    upload_dir(panel_s3, models, "tiny-llama", assets.model_dir)
    upload_dir(panel_s3, models, "chat", assets.data_file.parent)
    return {"models": models, "out": out}


@pytest.mark.slow
def test_finetune_preset_reaches_done_with_the_adapter_in_the_bucket(
    local_jobs: Any,
    project: Project,
    owner: Any,
    owner_api: APIClient,
    panel_s3: Any,
    demo_volumes: dict[str, str],
) -> None:
    models, out = demo_volumes["models"], demo_volumes["out"]
    job = submit(
        project,
        owner,
        preset="finetune",
        image="",
        command=[],
        flavor="ai1-1-cpu",
        params=TINY,
        volumes=[
            f"{models}@LOCAL/tiny-llama:/workspace/model",
            f"{models}@LOCAL/chat:/workspace/data",
            f"{out}@LOCAL/run1:/workspace/output:rw",
        ],
    )
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    job = wait_final(job)
    assert job.state == JobState.DONE, job.state_reason
    states = list(job.events.values_list("state", flat=True))
    assert JobState.RUNNING in states and JobState.FINALIZING in states
    keys = {o.key for o in iter_objects(panel_s3, bucket=out, prefix="run1/")}
    assert "run1/adapter/adapter_model.safetensors" in keys
    assert logs.archive_logs(job_id=job.pk)
    job.refresh_from_db()
    assert job.progress["last_event"] == "done" and job.progress["step"] == 4
    assert len(job.loss_curve) >= 1
    texts = [line.text for line in logs.tail(job=job, count=10_000)]
    assert any('"event": "progress"' in t or '"event":"progress"' in t for t in texts)
    # The process ran in a directory of this machine; the API shows the workload's paths.
    api = owner_api.get(f"/api/v1/jobs/{job.pk}/?project=alpha").json()
    assert api["progress"]["model"] == "/workspace/model"
    assert api["progress"]["adapter_path"] == "/workspace/output/adapter"
    log_page = owner_api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha&limit=5000").json()
    assert any(line["event"] for line in log_page["lines"]) and log_page["eof"] is True
    host = str(local_jobs.base)
    assert host not in json.dumps(api) and host not in json.dumps(log_page)


@pytest.mark.slow
def test_failing_process_records_exit_code_and_logs(
    local_jobs: Any, project: Project, owner: Any, panel_s3: Any, demo_volumes: dict[str, str]
) -> None:
    """A bad option makes the entry point exit 2 with an error event: FAILED, exit code 2."""
    models, out = demo_volumes["models"], demo_volumes["out"]
    job = submit(
        project,
        owner,
        preset="finetune",
        image="",
        command=[],
        flavor="ai1-1-cpu",
        params=TINY | {"target_modules": "no_such_module"},
        volumes=[
            f"{models}@LOCAL/tiny-llama:/workspace/model",
            f"{models}@LOCAL/chat:/workspace/data",
            f"{out}@LOCAL/run2:/workspace/output:rw",
        ],
    )
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    job = wait_final(job)
    assert job.state == JobState.FAILED and job.exit_code not in (None, 0), job.state_reason
    logs.archive_logs(job_id=job.pk)
    job.refresh_from_db()
    assert job.progress.get("last_event") == "error"
