"""The real images, built from the repository's Dockerfiles (`make test-images` builds them with
podman first): the panel image migrates, serves and runs a job through the Kubernetes emulator
with its web, worker, beat and watcher processes; as the sync image it pulls and pushes a volume;
the CPU variant of the fine-tune image trains the tiny model.

Containers share the host's network, so they reach the test PostgreSQL, Redis, S3 server and
Kubernetes emulator on loopback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlpanel.accounts.services import token_create
from controlpanel.engine.backend import job_ref
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from deploy.version import REGISTRY, VERSION
from storage.datastore import DatastoreConfig
from storage.objects import put_object, read_object
from tests.envdefaults import outside_variable
from tests.fixtures.llm import TinyLLM
from tests.fixtures.processes import Processes, database_url, wait_for

pytestmark = [pytest.mark.images, pytest.mark.slow]
PANEL = f"{REGISTRY}/ajuste:{VERSION}"
FINETUNE_CPU = f"{REGISTRY}/finetune:{VERSION}-cpu"
ENGINE = os.environ.get("ENGINE", "podman")
NS = "ajuste-alpha"


def _require(image: str) -> None:
    found = subprocess.run([ENGINE, "image", "exists", image], check=False).returncode == 0
    assert found, f"{image} is not built: run `make test-images` (it builds, then tests)"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ContainerProcesses(Processes):
    """`Processes` whose children run in containers of the panel image (host network)."""

    def start(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        container = f"ajuste-test-{name}-{uuid.uuid4().hex[:8]}"
        settings_env = [
            f"--env={key}={value}"
            for key, value in self.env.items()
            if outside_variable(key) or key in {"PYTHONUNBUFFERED", "JOB_SWEEP_SECONDS"}
        ]
        command = ["python" if arg.endswith(("/python", "/python3")) else arg for arg in argv]
        # The emulator's kubeconfig (its address and token), at the same path inside.
        mounts = [f"-v={path}:{path}:ro" for path in [self.env.get("KUBECONFIG")] if path]
        self.containers.append(container)
        return super().start(
            name,
            ENGINE,
            "run",
            "--rm",
            "--network=host",
            f"--name={container}",
            *settings_env,
            *mounts,
            PANEL,
            *command,
        )

    def stop_all(self) -> None:
        super().stop_all()
        if self.containers:
            subprocess.run([ENGINE, "rm", "-f", "-t", "5", *self.containers], capture_output=True)
            self.containers.clear()


@pytest.fixture
def panel(processes: Any, tmp_path: Path) -> Iterator[Any]:
    _require(PANEL)

    def make(env: dict[str, str]) -> ContainerProcesses:
        group: ContainerProcesses = processes(env)  # the same env the e2e tests give
        group.__class__ = ContainerProcesses
        group.containers = []
        return group

    yield make


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.e2e
@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_panel_image_migrates_serves_and_runs_a_job(
    panel: Any,
    k8s_cluster: Any,
    k8s_jobs: Any,
    panel_s3: DatastoreConfig,
    project: Project,
    owner: Any,
) -> None:
    # migrate on an empty database, from the image alone.
    scratch = f"{database_url()}_image_{uuid.uuid4().hex[:6]}"
    created = _run("psql", database_url(), "-c", f'CREATE DATABASE "{scratch.rsplit("/", 1)[1]}"')
    assert created.returncode == 0, created.stderr
    try:
        migrate = _run(
            ENGINE, "run", "--rm", "--network=host", f"--env=DATABASE_URL={scratch}",
            "--env=SECRET_KEY=image-test-secret-key-long-enough-0123456789", PANEL,
            "python", "manage.py", "migrate", "--noinput",
        )  # fmt: skip
        assert migrate.returncode == 0, migrate.stdout + migrate.stderr
        assert "Applying workloads.0001_initial... OK" in migrate.stdout
    finally:
        _run("psql", database_url(), "-c", f'DROP DATABASE "{scratch.rsplit("/", 1)[1]}"')

    port = _free_port()
    procs = panel(
        {
            "COMPUTE_BACKEND": "kubernetes",
            "KUBECONFIG": k8s_cluster.kubeconfig,  # its server and bearer token
            "S3_ENDPOINT_URL": panel_s3.endpoint_url,
            "S3_ACCESS_KEY": panel_s3.access_key,
            "S3_SECRET_KEY": panel_s3.secret_key,
            "S3_ALIAS": "LOCAL",
            "ALLOWED_HOSTS": "127.0.0.1",
        }
    )
    procs.start("web", "gunicorn", "controlpanel.wsgi:application", f"--bind=127.0.0.1:{port}")
    procs.worker()
    procs.beat()
    procs.watcher()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(ready, 90, "/readyz from the image", procs)
    # The browser assets the pages load were fetched into the image and collected.
    for asset in ("vendor/htmx/htmx.min.js", "vendor/chartjs/chart.umd.min.js"):
        served = httpx.get(f"{url}/static/{asset}", timeout=10)
        assert served.status_code == 200 and len(served.content) > 10_000, asset
    _, token = token_create(user=owner, name="image test")
    api = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}", "X-Ajuste-Project": "alpha"}
    )
    created_job = api.post(
        "/api/v1/jobs/",
        json={"name": "from-image", "image": "registry.example.com/t:1", "flavor": "l4-1-gpu",
              "command": ["python", "train.py"]},
    )  # fmt: skip
    assert created_job.status_code == 201, created_job.text
    job = Job.objects.get(pk=created_job.json()["id"])
    pods = wait_for(
        lambda: k8s_cluster.pods_of(NS, names.job_name(job_ref(job))), 60, "the pod", procs
    )
    pod = pods[0]["metadata"]["name"]
    k8s_cluster.kubelet.run(NS, pod)
    k8s_cluster.kubelet.log(NS, pod, "hello from the cluster")
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, 60, "RUNNING", procs)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.DONE, 60, "DONE", procs)
    body = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["state"] == "DONE" and body["exit_code"] == 0
    lines = api.get(f"/api/v1/jobs/{job.pk}/logs").json()["lines"]
    assert [line["text"] for line in lines] == ["hello from the cluster"]


def _open_dir(path: Path) -> Path:
    """A folder the image's unprivileged users (10001, 1000) may write."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


def test_panel_image_is_the_sync_image(
    tmp_path: Path, s3_server: DatastoreConfig, bucket: str
) -> None:
    _require(PANEL)
    put_object(s3_server, bucket=bucket, key="data/a.txt", data=b"alpha")
    sandbox = _open_dir(tmp_path / "sandbox")
    store = [
        f"--env=AJUSTE_DATASTORE_LOCAL_ENDPOINT_URL={s3_server.endpoint_url}",
        f"--env=AJUSTE_DATASTORE_LOCAL_REGION={s3_server.region}",
        f"--env=AJUSTE_DATASTORE_LOCAL_ACCESS_KEY={s3_server.access_key}",
        f"--env=AJUSTE_DATASTORE_LOCAL_SECRET_KEY={s3_server.secret_key}",
    ]
    sync = [ENGINE, "run", "--rm", "--network=host", *store, f"-v={sandbox}:/sandbox", PANEL]
    spec = f"{bucket}@LOCAL/data:/workspace/data:rw"
    pulled = _run(*sync, "python", "-m", "storage.sync", "pull", spec, "--root", "/sandbox")
    assert pulled.returncode == 0, pulled.stderr
    assert (sandbox / "workspace/data/a.txt").read_bytes() == b"alpha"
    (sandbox / "workspace/data/b.txt").write_bytes(b"beta")
    pushed = _run(*sync, "python", "-m", "storage.sync", "push", spec, "--root", "/sandbox")
    assert pushed.returncode == 0, pushed.stderr
    assert read_object(s3_server, bucket=bucket, key="data/b.txt", max_bytes=100) == b"beta"


def test_finetune_cpu_image_trains(tmp_path: Path, tiny_llm: TinyLLM) -> None:
    _require(FINETUNE_CPU)
    model = tmp_path / "model"
    shutil.copytree(tiny_llm.model_dir, model)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(tiny_llm.messages, data / "train.jsonl")
    for path in [model, data, *model.rglob("*"), *data.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the image's user (uid 1000) reads them
    output = _open_dir(tmp_path / "output")
    done = _run(
        ENGINE, "run", "--rm", "--network=none",
        f"-v={model}:/workspace/model:ro", f"-v={data}:/workspace/data:ro",
        f"-v={output}:/workspace/output", FINETUNE_CPU,
        "python", "-m", "training.finetune", "--model", "/workspace/model",
        "--data", "/workspace/data", "--output", "/workspace/output", "--max-steps", "2",
        "--batch-size", "2", "--max-length", "64",
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "done", events[-3:]
    assert any(p.name == "adapter_config.json" for p in output.rglob("*"))
