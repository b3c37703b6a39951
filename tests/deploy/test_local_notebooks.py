"""Real JupyterLab notebooks on the local backend: a server per notebook on a loopback port,
its token, /workspace with the volumes under it, stop and start at the same address."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import httpx
import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from deploy.local import LocalBackend
from deploy.local.editors import editor_problem
from deploy.local.paths import run_dir, workspace_dir
from deploy.local.plan import editor_argv, editor_env
from deploy.local.supervisor import ServerWatch, Supervisor
from deploy.types import Editor, NotebookRequest, ObservedWorkload, Phase, ProjectRequest
from storage.datastore import DatastoreConfig
from storage.errors import ObjectNotFound
from storage.objects import put_object, read_object
from storage.volumes import Mode, VolumeSpec
from tests.deploy.conftest import CPU
from tests.deploy.test_local_backend import NS, wait_until

PATH = "/notebooks/local/nb-1/"


@pytest.fixture
def local(tmp_path: Path, s3_server: DatastoreConfig) -> LocalBackend:
    backend = LocalBackend(base_dir=tmp_path / "local", grace_s=5.0, gpus=list)
    backend.ensure_project(
        project=ProjectRequest(slug="local", namespace=NS, gpu_quota=0, datastores=(s3_server,))
    )
    return backend


@pytest.fixture
def fast_activity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor reads the server's activity every 0.3 s instead of every 10 s."""
    monkeypatch.setattr("deploy.local.plan.ACTIVITY_EVERY_S", 0.3)


def notebook_request(bucket: str, **changes: object) -> NotebookRequest:
    values: dict[str, object] = {
        "id": "1",
        "project": "local",
        "namespace": NS,
        "name": "nb",
        "image": "ignored-locally",
        "flavor": CPU,
        "path": PATH,
        "volumes": (
            VolumeSpec(bucket, "LOCAL", "dataset", "/workspace/data", Mode.RO),
            VolumeSpec(bucket, "LOCAL", "results", "/workspace/results", Mode.RW),
        ),
        "push_every_s": 0,
    }
    values.update(changes)
    return NotebookRequest(**values)  # type: ignore[arg-type]


class Lab:
    """The Jupyter REST API of a RUNNING notebook, from the URL the backend reports."""

    def __init__(self, observed: ObservedWorkload) -> None:
        assert observed.url is not None
        parts = urlsplit(observed.url)
        self.base = f"{parts.scheme}://{parts.netloc}{parts.path}"
        self.token = parts.query.removeprefix("token=")
        self.client = httpx.Client(timeout=10)

    def get(self, path: str, *, token: bool = True) -> httpx.Response:
        if not token:  # nor the login cookie a request with the token was answered with
            return httpx.get(self.base + path, timeout=10)
        headers = {"Authorization": f"token {self.token}"}
        return self.client.get(self.base + path, headers=headers)

    def put_text(self, path: str, text: str) -> httpx.Response:
        body = {"type": "file", "format": "text", "content": text}
        headers = {"Authorization": f"token {self.token}"}
        return self.client.put(f"{self.base}api/contents/{path}", json=body, headers=headers)

    def read_text(self, path: str) -> str:
        response = self.get(f"api/contents/{path}?content=1&type=file&format=text")
        assert response.status_code == 200, response.text
        return str(response.json()["content"])


def running(backend: LocalBackend, notebook: NotebookRequest) -> ObservedWorkload:
    return wait_until(backend, notebook.ref, lambda o: o.phase in (Phase.RUNNING, Phase.FAILED))


@pytest.fixture
def cleanup(local: LocalBackend) -> Iterator[list[NotebookRequest]]:
    started: list[NotebookRequest] = []
    yield started
    for notebook in started:
        local.delete_notebook(ref=notebook.ref)


@pytest.mark.slow
def test_a_jupyterlab_notebook_stops_and_starts_with_its_workspace_and_volumes(
    local: LocalBackend,
    s3_server: DatastoreConfig,
    bucket: str,
    cleanup: list[NotebookRequest],
) -> None:
    put_object(s3_server, bucket=bucket, key="dataset/corpus.txt", data=b"hello corpus")
    notebook = notebook_request(bucket)
    cleanup.append(notebook)
    local.apply_notebook(notebook=notebook)
    first = running(local, notebook)
    assert first.phase is Phase.RUNNING, first.reason
    assert first.url is not None
    assert first.url.startswith("http://127.0.0.1:") and f"{PATH}?token=" in first.url
    lab = Lab(first)

    # RUNNING means it answers: the first request does, with the token and under the path.
    status = lab.get("api/status")
    assert status.status_code == 200
    assert set(status.json()) >= {"last_activity", "kernels", "connections"}
    assert lab.get("api/status", token=False).status_code == 403
    assert lab.get("lab").status_code == 200  # the JupyterLab page itself

    # /workspace is the server's root, the volumes are pulled under it.
    assert lab.read_text("data/corpus.txt") == "hello corpus"
    assert lab.put_text("notes.txt", "kept across stop and start").status_code == 201
    assert lab.put_text("results/metrics.txt", "loss 0.1").status_code == 201
    workspace = workspace_dir(run_dir(local.base, notebook.ref))
    assert (workspace / "notes.txt").read_text() == "kept across stop and start"

    # Stop: the rw volume is pushed, the server ends, the workspace stays.
    local.apply_notebook(notebook=replace(notebook, running=False))
    stopped = wait_until(local, notebook.ref, lambda o: o.phase.is_final)
    assert (stopped.phase, stopped.reason) == (Phase.STOPPED, "stopped at the user's request")
    assert stopped.url is None
    pushed = read_object(s3_server, bucket=bucket, key="results/metrics.txt", max_bytes=100)
    assert pushed == b"loss 0.1"
    with pytest.raises(httpx.TransportError):
        lab.get("api/status")
    assert (workspace / "notes.txt").exists()

    # Start again: the same address and token, the files where they were.
    local.apply_notebook(notebook=notebook)
    again = running(local, notebook)
    assert again.phase is Phase.RUNNING, again.reason
    assert again.url == first.url and again.run_uid != first.run_uid
    assert lab.get("api/status").status_code == 200
    assert lab.read_text("notes.txt") == "kept across stop and start"
    assert lab.read_text("results/metrics.txt") == "loss 0.1"


@pytest.mark.slow
def test_the_servers_own_activity_is_observed_and_rw_volumes_are_pushed_while_it_runs(
    local: LocalBackend,
    s3_server: DatastoreConfig,
    bucket: str,
    cleanup: list[NotebookRequest],
    fast_activity: None,
) -> None:
    notebook = notebook_request(bucket, id="2", path="/", push_every_s=1)
    cleanup.append(notebook)
    local.apply_notebook(notebook=notebook)
    first = running(local, notebook)
    assert first.phase is Phase.RUNNING, first.reason
    assert first.last_activity is not None
    lab = Lab(first)

    # A status request is no activity (the supervisor's own polling must not keep it awake).
    assert (
        lab.get("api/status").json()["last_activity"]
        == lab.get("api/status").json()["last_activity"]
    )
    # Saving a file is: the observation's last activity moves past the first one.
    assert lab.put_text("results/epoch-1.txt", "checkpoint").status_code == 201
    later = wait_until(
        local,
        notebook.ref,
        lambda o: o.last_activity is not None and o.last_activity > first.last_activity,  # type: ignore[operator]
    )
    assert later.phase is Phase.RUNNING

    # The periodic push takes the file to the bucket while the notebook still runs.
    def in_bucket(_: ObservedWorkload) -> bool:
        try:
            read_object(s3_server, bucket=bucket, key="results/epoch-1.txt", max_bytes=99)
        except ObjectNotFound:
            return False
        return True

    wait_until(local, notebook.ref, in_bucket)
    assert local.observe_notebook(ref=notebook.ref).phase is Phase.RUNNING


async def execute(lab: Lab, kernel_id: str, code: str) -> WebSocketClientConnection:
    """Send `code` to the kernel over its channels (as the browser does); the open socket."""
    url = f"{lab.base.replace('http', 'ws', 1)}api/kernels/{kernel_id}/channels"
    request = HTTPRequest(url, headers={"Authorization": f"token {lab.token}"})
    socket_ = await websocket_connect(request)
    header = {
        "msg_id": uuid.uuid4().hex,
        "session": uuid.uuid4().hex,
        "username": "test",
        "msg_type": "execute_request",
        "version": "5.3",
        "date": "",
    }
    message = {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False},
        "channel": "shell",
    }
    await socket_.write_message(json.dumps(message))
    return socket_


@pytest.mark.slow
def test_a_busy_kernel_is_activity_though_it_prints_nothing(
    local: LocalBackend,
    bucket: str,
    cleanup: list[NotebookRequest],
    fast_activity: None,
) -> None:
    notebook = notebook_request(bucket, id="3", path="/", volumes=())
    cleanup.append(notebook)
    local.apply_notebook(notebook=notebook)
    lab = Lab(running(local, notebook))
    kernel = lab.client.post(
        f"{lab.base}api/kernels",
        json={"name": "python3"},
        headers={"Authorization": f"token {lab.token}"},
        timeout=30,
    )
    assert kernel.status_code == 201, kernel.text
    # The websocket's own event loop, on a thread of its own: this test must not depend on
    # whether the process already runs a loop (Playwright's does, in a full run).
    loop = asyncio.new_event_loop()
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.set_event_loop, loop).result()
        code = "import time; time.sleep(120)"
        socket_ = thread.submit(
            loop.run_until_complete, execute(lab, kernel.json()["id"], code)
        ).result()
        try:
            sent = datetime.now(UTC)
            # Jupyter's own last activity stays at the moment the cell began; the observation
            # keeps moving while the kernel is busy, so an idle stop does not cut a long cell.
            busy = wait_until(
                local,
                notebook.ref,
                lambda o: (
                    o.last_activity is not None and o.last_activity > sent + timedelta(seconds=2)
                ),
            )
            assert busy.phase is Phase.RUNNING
        finally:
            thread.submit(socket_.close).result()
            thread.submit(loop.close).result()


def test_the_token_stays_off_the_command_line(tmp_path: Path) -> None:
    notebook = notebook_request("corpus")
    argv = editor_argv(notebook, python="python", port=8888)
    env = editor_env(notebook, run=tmp_path, token="s3cr3t")
    assert not any("s3cr3t" in arg for arg in argv)
    assert env["JUPYTER_TOKEN"] == "s3cr3t"
    assert f"--ServerApp.base_url={PATH}" in argv and "--ServerApp.port_retries=0" in argv
    # Its runtime files (kernel keys, the server's file with the token) stay in the run.
    assert env["JUPYTER_RUNTIME_DIR"].startswith(str(tmp_path))


def test_vscode_says_why_it_is_unavailable_before_and_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no code-server on this PATH
    why = editor_problem(Editor.VSCODE)
    assert why.startswith("VS Code (code-server) is not installed on this machine: ")
    assert "choose JupyterLab, or run notebooks on the Kubernetes backend" in why
    assert editor_problem(Editor.JUPYTERLAB) == ""  # a dependency of the local backend

    backend = LocalBackend(base_dir=tmp_path / "local", gpus=list)
    notebook = notebook_request("corpus", editor=Editor.VSCODE, volumes=())
    observed = backend.apply_notebook(notebook=notebook)
    assert (observed.phase, observed.reason) == (Phase.FAILED, why)


def test_an_editor_that_never_answers_fails_its_start_after_the_ready_time() -> None:
    with socket.socket() as taken:  # bound, never listening: every connection is refused
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        watch = ServerWatch({"api": f"http://127.0.0.1:{port}/api/", "token": "t", "ready_s": 0.05})
        supervisor = cast(Supervisor, None)  # only an answering server is reported to it
        assert watch.tick(supervisor) == ""  # the ready time starts at the first look
        time.sleep(0.2)
        assert watch.tick(supervisor) == "the editor did not answer on its port in time"


def test_a_secret_the_env_references_and_the_project_lacks_fails_the_start(
    tmp_path: Path,
) -> None:
    """`secret:NAME` env values reach a notebook like a job: from the project's secrets; a
    missing one fails the start with the reason, before any server runs."""
    backend = LocalBackend(base_dir=tmp_path / "local", gpus=list)
    notebook = replace(notebook_request("corpus", volumes=()), secret_env={"HF_TOKEN": "hf-token"})
    observed = backend.apply_notebook(notebook=notebook)
    assert (observed.phase, observed.reason) == (
        Phase.FAILED,
        "the project has no secret named hf-token",
    )
