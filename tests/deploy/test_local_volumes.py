"""The local backend with real volumes on the test S3 server, and local notebooks."""

from __future__ import annotations

import importlib.util
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deploy.local import LocalBackend
from deploy.local.paths import run_dir
from deploy.types import NotebookRequest, Phase, ProjectRequest
from storage.datastore import DatastoreConfig
from storage.objects import create_bucket, delete_bucket, put_object, read_object
from storage.volumes import Mode, VolumeSpec
from tests.deploy.conftest import CPU
from tests.deploy.test_local_backend import NS, finished, py_job, running, wait_until

# Reads the dataset, waits for the test's go-ahead (a file), writes a checkpoint. Paths come
# from argv, where the local backend rewrites /workspace (as it does for training.finetune).
TRAIN = (
    "import pathlib, sys, time\n"
    "data, output, go = map(pathlib.Path, sys.argv[1:])\n"
    "text = data.read_text()\n"
    "while not go.exists(): time.sleep(0.05)\n"
    "output.mkdir(parents=True, exist_ok=True)\n"
    "(output / 'model.txt').write_text(text.upper())\n"
    "print('trained on', len(text), 'bytes')\n"
)


@pytest.fixture
def local(tmp_path: Path, s3_server: DatastoreConfig) -> LocalBackend:
    backend = LocalBackend(base_dir=tmp_path / "local", grace_s=1.0, gpus=list, any_command=True)
    backend.ensure_project(
        project=ProjectRequest(slug="local", namespace=NS, gpu_quota=0, datastores=(s3_server,))
    )
    return backend


def train_job(bucket: str, go: Path, output_mode: Mode) -> Any:
    """TRAIN reading the bucket's dataset/ and writing output/ (mounted `output_mode`) once
    the file `go` exists."""
    return py_job(
        TRAIN,
        "/workspace/data/corpus.txt",
        "/workspace/output",
        str(go),
        volumes=(
            VolumeSpec(bucket, "LOCAL", "dataset", "/workspace/data", Mode.RO),
            VolumeSpec(bucket, "LOCAL", "output", "/workspace/output", output_mode),
        ),
        push_every_s=0,
    )


@pytest.mark.slow
def test_pull_run_push_then_sync_failed_and_retry(
    local: LocalBackend, s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="dataset/corpus.txt", data=b"hello corpus")
    go = tmp_path / "go"
    job = train_job(bucket, go, Mode.RW)
    local.apply_job(job=job)
    running(local, job.ref)
    delete_bucket(s3_server, bucket=bucket, force=True)  # the push will find no bucket
    go.touch()
    failed = finished(local, job.ref)
    assert (failed.phase, failed.exit_code, failed.push_attempt) == (Phase.SYNC_FAILED, 0, 1)
    assert failed.reason.startswith(
        f"final push failed: {bucket}@LOCAL/output:/workspace/output:rw"
    )
    assert "NoSuchBucket" in failed.reason

    create_bucket(s3_server, bucket=bucket)
    local.retry_push(job=job)
    done = wait_until(local, job.ref, lambda o: o.phase is Phase.SUCCEEDED)
    assert (done.push_attempt, done.reason) == (2, "exit code 0")
    model = read_object(s3_server, bucket=bucket, key="output/model.txt", max_bytes=100)
    assert model == b"HELLO CORPUS"


@pytest.mark.slow
def test_the_push_keeps_what_others_changed_meanwhile_and_reports_conflicts(
    local: LocalBackend, s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="dataset/corpus.txt", data=b"hello corpus")
    put_object(s3_server, bucket=bucket, key="output/model.txt", data=b"base model")
    put_object(s3_server, bucket=bucket, key="output/notes.txt", data=b"pulled, untouched")
    go = tmp_path / "go"
    job = train_job(bucket, go, Mode.RWD)
    local.apply_job(job=job)
    running(local, job.ref)  # pulled
    # Someone else, while the job runs: a new object, and new versions of two pulled ones.
    put_object(s3_server, bucket=bucket, key="output/theirs.txt", data=b"uploaded meanwhile")
    put_object(s3_server, bucket=bucket, key="output/model.txt", data=b"their model")
    put_object(s3_server, bucket=bucket, key="output/notes.txt", data=b"their notes")
    go.touch()  # the job writes output/model.txt
    done = finished(local, job.ref)
    assert (done.phase, done.reason) == (Phase.SUCCEEDED, "exit code 0")
    assert done.push_note == ("pushed with 1 conflict: output/model.txt; the remote copy was kept")
    contents = {
        key: read_object(s3_server, bucket=bucket, key=f"output/{key}", max_bytes=100)
        for key in ("model.txt", "notes.txt", "theirs.txt")
    }
    assert contents == {
        "model.txt": b"their model",
        "notes.txt": b"their notes",
        "theirs.txt": b"uploaded meanwhile",
    }
    # The manifests sit beside the run's root, never inside a volume.
    run = run_dir(tmp_path / "local", job.ref)
    assert len(list((run / "sync").glob("manifest-*.json"))) == 2
    inside = [p.name for p in (run / "root").rglob("*") if "manifest" in p.name]
    assert inside == []


@pytest.mark.slow
def test_a_missing_dataset_fails_the_pull(local: LocalBackend, s3_server: DatastoreConfig) -> None:
    job = py_job(
        "print('never')",
        volumes=(VolumeSpec("no-such-bucket-ajuste", "LOCAL", "", "/workspace/data", Mode.RO),),
    )
    local.apply_job(job=job)
    observed = finished(local, job.ref)
    assert observed.phase is Phase.FAILED
    assert observed.reason.startswith("volume pull failed: ")
    assert observed.started_at is None  # the user's process never ran: nothing to bill


def test_local_notebook_stops_and_restarts_at_the_same_url(tmp_path: Path) -> None:
    backend = LocalBackend(base_dir=tmp_path, grace_s=1.0, gpus=list, any_command=True)
    notebook = NotebookRequest(
        id="5",
        project="local",
        namespace=NS,
        name="nb",
        image="ignored-locally",
        flavor=CPU,
        command=("python", "-m", "http.server", "{port}", "--bind", "127.0.0.1"),
    )
    backend.apply_notebook(notebook=notebook)
    first = wait_until(backend, notebook.ref, lambda o: o.phase is Phase.RUNNING)
    assert first.url is not None and first.url.startswith("http://127.0.0.1:")
    served = _get(first.url, attempts=50)
    assert served == 200

    stopped = backend.apply_notebook(notebook=replace(notebook, running=False))
    assert stopped.phase in (Phase.STOPPING, Phase.RUNNING, Phase.STOPPED)
    assert wait_until(backend, notebook.ref, lambda o: o.phase.is_final).phase is Phase.STOPPED

    backend.apply_notebook(notebook=notebook)
    again = wait_until(backend, notebook.ref, lambda o: o.phase is Phase.RUNNING)
    assert again.url == first.url and again.run_uid != first.run_uid
    backend.delete_notebook(ref=notebook.ref)
    assert backend.observe_notebook(ref=notebook.ref).phase is Phase.GONE


def _jupyter_notebook() -> NotebookRequest:
    return NotebookRequest(
        id="6", project="local", namespace=NS, name="nb", image="jupyter", flavor=CPU
    )


def test_local_notebook_without_its_editor_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jupyterlab is locked, so it is installed wherever the tests run: the machine without it
    is made by hiding the package from the backend's check (importlib's find_spec)."""
    find_spec = importlib.util.find_spec

    def without_jupyterlab(name: str, package: str | None = None) -> Any:
        return None if name == "jupyterlab" else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_jupyterlab)
    backend = LocalBackend(base_dir=tmp_path, gpus=list, any_command=True)
    observed = backend.apply_notebook(notebook=_jupyter_notebook())
    assert observed.phase is Phase.FAILED
    assert observed.reason == (
        "JupyterLab is not installed in this environment (pip install jupyterlab)"
    )


def test_local_notebook_with_its_editor_starts(tmp_path: Path) -> None:
    backend = LocalBackend(base_dir=tmp_path, gpus=list, any_command=True)
    observed = backend.apply_notebook(notebook=_jupyter_notebook())
    try:
        assert observed.phase is Phase.INITIALIZING
    finally:
        backend.delete_notebook(ref=_jupyter_notebook().ref)


def _get(url: str, *, attempts: int) -> int:
    """The HTTP status of `url`, waiting for the server to listen."""
    import time

    for _ in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                return int(response.status)
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} never answered")
