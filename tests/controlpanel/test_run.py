"""`make run` (python -m controlpanel.run) as a newcomer meets it (#32), with real processes:
taken default ports move and everything follows the web's (SITE_URL, the store's CORS); a
crash (kill -9) leaves nothing the next start does not clean, and the local runs it left are
taken back; Ctrl-C stops everything, the local backend's runs included; mail lands in
var/mail/; /metrics answers the admin; a colleague's account stops the start with the one-line
fix, said first and alone."""

from __future__ import annotations

import email
import email.policy
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from controlpanel.localrun import pids
from controlpanel.runenv import FILE_NAME
from deploy.local import LocalBackend
from deploy.local.shutdown import live_runs, stop_runs
from deploy.types import Phase
from storage import objects
from storage.datastore import DatastoreConfig
from tests.deploy.test_local_backend import py_job, running
from tests.envdefaults import outside_variable

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = (8000, 8001, 6389, 9100)  # the web's, the streams', Redis's, the store's: taken in tests
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _shell(var: Path) -> dict[str, str]:
    """A newcomer's shell: none of the test session's settings, no port chosen."""
    env = {k: v for k, v in os.environ.items() if not outside_variable(k)}
    return env | {"AJUSTE_VAR_DIR": str(var), "WEB_WORKERS": "1", "WORKER_CONCURRENCY": "1"}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A var/ that make run prepared once (migrated SQLite, the admin): copied by each test."""
    var = tmp_path_factory.mktemp("template") / "var"
    var.mkdir()
    (var / "secret_key").write_text("k" * 60)
    env = _shell(var) | {"SECRET_KEY": "k" * 60, "STATIC_COMPRESS": "0", "DEBUG": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "controlpanel.localrun.prepare"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return var


@pytest.fixture
def var(migrated: Path, tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "var"
    shutil.copytree(migrated, copy)
    yield copy
    # A failed test leaves nothing running either: what its make run recorded is stopped.
    stop_runs(copy / "workloads", wait_s=5)
    pids.clean_leftovers(copy, wait_s=5)


@pytest.fixture
def defaults_taken() -> Iterator[None]:
    """The default ports are in use (by us when nobody else holds them)."""
    with ExitStack() as stack:
        for port in DEFAULTS:
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                pass  # someone else's: taken all the same
        yield


class Run:
    """One `make run`, in a session of its own (as a terminal's foreground job)."""

    def __init__(self, var: Path, env: dict[str, str]) -> None:
        self.log = var.parent / f"make-run-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controlpanel.run"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self) -> str:
        deadline = time.monotonic() + 240
        while not (found := re.search(r"Ajuste is up at (http://\S+)", self.text())):
            assert self.proc.poll() is None, self.text()[-4000:]
            assert time.monotonic() < deadline, self.text()[-4000:]
            time.sleep(0.3)
        return found.group(1)

    def ctrl_c(self) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)  # what a terminal sends its foreground job
        return self.proc.wait(120)

    def kill(self) -> None:
        """After a failure: a Ctrl-C first (make run stops its own), then at once."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def processes_of(var: Path) -> list[str]:
    """Every live process that belongs to this var/: its environment, arguments or working
    directory name it (web, worker, Redis, s3rver, local runs' supervisors and processes)."""
    found, mark = [], str(var).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if "\nState:\tZ" in (proc / "status").read_text():
                continue
            cmdline = (proc / "cmdline").read_bytes()
            named = mark in cmdline or mark in (proc / "environ").read_bytes()
            named = named or os.readlink(proc / "cwd").startswith(str(var))
        except OSError:
            continue
        if named:
            words = cmdline.replace(b"\0", b" ")[:150].decode(errors="replace")
            found.append(f"{proc.name}: {words}")
    return found


def _login(url: str, var: Path) -> httpx.Client:
    username, password = (var / "admin-password.txt").read_text().split()
    client = httpx.Client(base_url=url, timeout=30)
    client.get("/login/")
    token = client.cookies["csrftoken"]
    form = {"username": username, "password": password, "csrfmiddlewaretoken": token}
    assert client.post("/login/", data=form).status_code == 302
    return client


def _run_env(var: Path) -> dict[str, str]:
    text = (var / FILE_NAME).read_text()
    return dict(line.split("=", 1) for line in text.splitlines())


def test_crash_restart_ports_mail_metrics_then_ctrl_c_stops_everything(
    var: Path, defaults_taken: None
) -> None:
    env = _shell(var)
    first = Run(var, env)
    try:
        first.url()
        local = LocalBackend(base_dir=var / "workloads", grace_s=2.0, gpus=list, any_command=True)
        job = py_job("import time; time.sleep(600)", id="training", namespace="ajuste-demo")
        local.apply_job(job=job)
        running(local, job.ref)
        crashed = [p for p in processes_of(var) if not _local_run(p)]
        os.kill(first.proc.pid, signal.SIGKILL)  # make run itself dies; what it started does not
        first.proc.wait()
        assert any("gunicorn" in p for p in crashed) and any("redis" in p for p in crashed)
        assert len([p for p in processes_of(var) if not _local_run(p)]) == len(crashed) - 1
    finally:
        if first.proc.poll() is None:
            first.kill()

    second = Run(var, env)
    try:
        url = second.url()
        said = second.text()
        assert "• stopped what the last make run left running: " in said
        assert "proc-web" in said and "redis" in said and "s3" in said
        assert "• still running from the last make run, taken back: job-training-r1" in said
        now = {p.split(":")[0] for p in processes_of(var)}
        assert [p for p in crashed if p.split(":")[0] in now] == []  # none of the first's left
        _ports_follow_the_web(url, var, said)
        _mail_and_metrics(url, var, second)
        assert [run.name for run, _ in live_runs(var / "workloads")] == ["job-training-r1"]
        assert second.ctrl_c() == 0
    finally:
        second.kill()
    assert "• stopped the local runs: job-training-r1" in second.text()
    assert processes_of(var) == []
    assert list((var / "run").glob("*.pid")) == []
    assert local.observe_job(ref=job.ref).phase is Phase.STOPPED


def _ports_follow_the_web(url: str, var: Path, said: str) -> None:
    port = int(url.rsplit(":", 1)[1])
    assert port != 8000 and f"• port 8000 is taken: port {port} for the web" in said
    chosen = _run_env(var)
    assert chosen["SITE_URL"] == url  # links and e-mails name the port the web took
    assert not chosen["REDIS_URL"].endswith(":6389/0")
    assert chosen["S3_ENDPOINT_URL"] != "http://127.0.0.1:9100"
    # a browser upload from the page's own origin passes the store's CORS; another does not
    store = DatastoreConfig(
        "LOCAL",
        chosen["S3_ENDPOINT_URL"],
        chosen["S3_REGION"],
        chosen["S3_ACCESS_KEY"],
        chosen["S3_SECRET_KEY"],
    )
    objects.create_bucket(store, bucket="uploads")
    for origin, status in ((url, 200), ("http://127.0.0.1:8000", 403)):
        preflight = httpx.options(
            f"{store.endpoint_url}/uploads/x",
            headers={"Origin": origin, "Access-Control-Request-Method": "PUT"},
        )
        assert preflight.status_code == status, (origin, preflight.text)
    assert httpx.get(f"{url}/login/").status_code == 200


def _local_run(process: str) -> bool:
    return "deploy.local.supervisor" in process or "time.sleep(600)" in process


def _mail_and_metrics(url: str, var: Path, run: Run) -> None:
    assert f"• e-mails (invitations, notifications) are kept in {var / 'mail'}/" in run.text()
    admin = _login(url, var)
    metrics = admin.get("/metrics")
    assert metrics.status_code == 200 and "ajuste_" in metrics.text  # no METRICS_TOKEN here
    token = admin.cookies["csrftoken"]
    invited = admin.post(
        "/p/demo/members/invite/",
        data={"email": "colleague@example.com", "role": "member", "csrfmiddlewaretoken": token},
        headers={"Referer": url},
    )
    assert invited.status_code in (200, 302), invited.text[-2000:]
    [mail] = (var / "mail").glob("*.eml")
    body = email.message_from_bytes(mail.read_bytes(), policy=email.policy.default)
    assert "colleague@example.com" in mail.name
    assert f"{url}/invite/" in body.get_body().get_content()  # type: ignore[union-attr]
    assert "invites you" not in run.text()  # no longer among the web's access-log lines
    admin.close()


def test_a_colleagues_account_stops_the_start_first_alone_with_the_fix(
    var: Path, defaults_taken: None
) -> None:
    """The default ports are taken: their notes wait until the start may go on."""
    env = _shell(var)
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "from django.contrib.auth import get_user_model as m; "
         "m().objects.create_user('colleague', 'c@example.com', 'a-long-password-1')"],
        cwd=ROOT, env=env | {"SECRET_KEY": "k" * 60}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    refused = subprocess.run(
        [sys.executable, "-m", "controlpanel.run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert refused.returncode == 1
    said = (refused.stdout + refused.stderr).strip().splitlines()
    assert said[0].startswith("make run: the local backend runs every job and notebook as")
    assert "2 active users" in said[0]
    assert "      AJUSTE_LOCAL_BACKEND_TRUSTED=1 make run" in said
    text = "\n".join(said)
    assert "migrate" not in text and "W040" not in text and "Traceback" not in text
    assert not any(line.startswith("•") for line in said)  # nothing else said, nothing started
    assert processes_of(var) == []

    trusted = Run(var, env | {"AJUSTE_LOCAL_BACKEND_TRUSTED": "1"})
    try:
        assert httpx.get(f"{trusted.url()}/login/").status_code == 200
        # manage.py in this checkout agrees with the start it was given (var/run.env)
        assert _run_env(var)["AJUSTE_LOCAL_BACKEND_TRUSTED"] == "1"
        assert trusted.ctrl_c() == 0
    finally:
        trusted.kill()
    assert processes_of(var) == []


def test_a_closed_terminal_stops_everything(var: Path) -> None:
    """The terminal goes (SIGHUP) and with it whatever reads make run's output: the stop still
    runs to its end (it used to die on the first line it printed, leaving the rest running)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlpanel.run"],
        cwd=ROOT,
        env=_shell(var),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        seen = b""
        while b"Ajuste is up" not in seen:
            assert proc.poll() is None and time.monotonic() < deadline, seen[-3000:]
            seen += proc.stdout.readline()
        assert len(processes_of(var)) >= 6  # web (2), worker, notifier, watcher, beat, ...
        proc.stdout.close()  # nobody reads make run any more
        os.killpg(proc.pid, signal.SIGHUP)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert processes_of(var) == []
    assert list((var / "run").glob("*.pid")) == []
