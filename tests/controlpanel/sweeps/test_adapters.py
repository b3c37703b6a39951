"""Adapters: recorded from a DONE fine-tune's output folder in the bucket (lineage, held-out
loss), a forged lineage refused, which keys changed between two, and the MLflow export.

The export is tested against MLflow's own client writing to its local SQLite tracking store
(`sqlite:///...`): a real `mlflow server` needs the whole `mlflow` package (Flask, pandas,
pyarrow, scikit-learn...), too much for the lock and CI's time; the file store is retired in
MLflow 3 (the client refuses it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from controlpanel.engine import curves
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.sweeps import tasks
from controlpanel.sweeps.adapters import adapter_record, lineage_changes
from controlpanel.sweeps.models import Adapter
from storage.objects import put_object
from storage.sync.lineage import Pulled, volume_entry
from storage.volumes import parse_volume_spec
from tests.fixtures.jobs import project_bucket, put_dataset, submit


@pytest.fixture
def bucket(project: Project, panel_s3: Any) -> str:
    name = project_bucket(project, panel_s3).name
    put_dataset(panel_s3, name)
    return name


def lineage_doc(bucket: str, objects: dict[str, str]) -> bytes:
    spec = parse_volume_spec(f"{bucket}@LOCAL/chat:/workspace/data")
    pulled = {key: Pulled(etag, 10) for key, etag in objects.items()}
    return json.dumps({"version": 1, "volumes": [volume_entry(spec, pulled, False)]}).encode()


def done_job(
    project: Project, owner: Any, bucket: str, panel_s3: Any, run: str, **data: Any
) -> Job:
    """A fine-tune that ended DONE, its output folder as the entry point and the pull left it."""
    job = submit(
        project,
        owner,
        preset="finetune",
        image="",
        command=[],
        flavor="ai1-1-cpu",
        params={"base_model": "org/tiny", "learning_rate": 1e-3},
        volumes=[
            f"{bucket}@LOCAL/chat:/workspace/data",
            f"{bucket}@LOCAL/{run}:/workspace/output:rw",
        ],
    )
    job.progress = {"last_event": "done", "adapter_path": "/workspace/output/adapter"}
    job.save(update_fields=["progress"])
    curves.replace(job, [[1, 6.0, 10.0, 1e-3], [2, 5.5, 10.0, 1e-3]])
    metrics = (
        '{"event":"eval","v":1,"time":1,"step":2,"eval_loss":5.75,'
        '"eval_perplexity":3,"eval_tokens":9}\n'
    )
    put_object(panel_s3, bucket=bucket, key=f"{run}/metrics.jsonl", data=metrics.encode())
    for key, value in data.items():
        put_object(panel_s3, bucket=bucket, key=f"{run}/{key}", data=value)
    record_state(job, "DONE", "exit code 0")
    return job


def test_a_done_fine_tune_records_its_adapter_with_lineage_and_losses(
    project: Project, owner: Any, bucket: str, panel_s3: Any, owner_client: Client
) -> None:
    first = done_job(
        project,
        owner,
        bucket,
        panel_s3,
        "r1",
        **{
            ".ajuste/lineage.json": lineage_doc(
                bucket, {"chat/a.jsonl": "e1", "chat/b.jsonl": "e2"}
            )
        },
    )
    second = done_job(
        project,
        owner,
        bucket,
        panel_s3,
        "r2",
        **{
            ".ajuste/lineage.json": lineage_doc(
                bucket, {"chat/a.jsonl": "e1", "chat/b.jsonl": "e9"}
            )
        },
    )
    a = adapter_record(job_id=first.pk, run=1)
    b = adapter_record(job_id=second.pk, run=1)
    assert a is not None and b is not None
    assert adapter_record(job_id=first.pk, run=1) == a  # again: the same row
    assert Adapter.objects.count() == 2
    assert a.location == f"{bucket}@LOCAL/r1/adapter" and a.base_model == "org/tiny"
    assert (a.final_loss, a.eval_loss) == (5.5, 5.75)
    assert a.data_digest.startswith("sha256:") and a.data_digest != b.data_digest
    assert lineage_changes(before=a, after=b) == [
        {"mount_path": "/workspace/data", "added": [], "removed": [], "changed": ["chat/b.jsonl"]}
    ]
    page = owner_client.get(f"/p/alpha/adapters/?a={a.pk}&b={b.pk}").content.decode()
    assert "changed: <code>chat/b.jsonl</code>" in page
    assert f"/p/alpha/apps/new/?from_job={first.pk}" in page


def test_a_forged_lineage_is_not_believed(
    project: Project, owner: Any, bucket: str, panel_s3: Any
) -> None:
    """The file lies in the user's bucket: a digest that does not match its objects."""
    forged = json.loads(lineage_doc(bucket, {"chat/a.jsonl": "e1"}))
    forged["volumes"][0]["objects"]["chat/a.jsonl"]["etag"] = "other"
    job = done_job(
        project,
        owner,
        bucket,
        panel_s3,
        "r3",
        **{".ajuste/lineage.json": json.dumps(forged).encode()},
    )
    adapter = adapter_record(job_id=job.pk, run=1)
    assert adapter is not None and adapter.data_digest == "" and adapter.lineage == []
    assert adapter.lineage_problem == "no lineage: the digest of " + (
        f"{bucket}@LOCAL/chat:/workspace/data:ro does not match its objects"
    )
    missing = done_job(project, owner, bucket, panel_s3, "r4")
    assert adapter_record(job_id=missing.pk, run=1).lineage_problem.startswith("no lineage:")


def test_the_mlflow_export_writes_one_run_per_adapter(
    project: Project, owner: Any, bucket: str, panel_s3: Any, settings: Any, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = done_job(
        project,
        owner,
        bucket,
        panel_s3,
        "r5",
        **{".ajuste/lineage.json": lineage_doc(bucket, {"chat/a.jsonl": "e1"})},
    )
    adapter = adapter_record(job_id=job.pk, run=1)
    assert adapter is not None
    tasks.adapter_export(adapter.pk)
    tasks.adapter_export(adapter.pk)  # a duplicate exports nothing twice
    client = MlflowClient(tracking_uri=settings.MLFLOW_TRACKING_URI)
    experiment = client.get_experiment_by_name("ajuste/alpha")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params["learning_rate"] == "0.001"
    assert run.data.tags["ajuste.adapter"] == f"{bucket}@LOCAL/r5/adapter"
    assert run.data.tags["ajuste.data_digest"] == adapter.data_digest
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 6.0), (2, 5.5)]
    assert run.data.metrics["eval_loss"] == 5.75
