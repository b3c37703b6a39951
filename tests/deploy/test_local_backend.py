"""The local backend runs real processes: exit codes, stop, timeout, logs, restarts, GPUs."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deploy.images import FINETUNE_IMAGE
from deploy.local import LocalBackend
from deploy.local.gpus import Gpu
from deploy.local.paths import run_dir
from deploy.local.state import read_state
from deploy.local.supervisor import JOB_NICE
from deploy.types import JobRequest, ObservedWorkload, Phase, ProjectRequest, WorkloadRef
from tests.deploy.conftest import CPU, H100

NS = "ajuste-local"


def py_job(code: str, *args: str, **changes: Any) -> JobRequest:
    """A job of the fine-tune image running `python -c code args...`."""
    values: dict[str, Any] = {
        "id": "1",
        "project": "local",
        "namespace": NS,
        "name": "test",
        "image": FINETUNE_IMAGE,
        "command": ("python", "-c", code, *args),
        "flavor": CPU,
        "units": 1,
    }
    values.update(changes)
    return JobRequest(**values)


def wait_until(
    backend: LocalBackend, ref: WorkloadRef, test: Callable[[ObservedWorkload], bool]
) -> ObservedWorkload:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        observed = backend.observe_job(ref=ref)
        if test(observed):
            return observed
        time.sleep(0.05)
    raise AssertionError(f"still {observed}")


def finished(backend: LocalBackend, ref: WorkloadRef) -> ObservedWorkload:
    return wait_until(backend, ref, lambda o: o.phase.is_final)


def running(backend: LocalBackend, ref: WorkloadRef) -> ObservedWorkload:
    return wait_until(backend, ref, lambda o: o.phase is Phase.RUNNING)


@pytest.fixture
def local(tmp_path: Path) -> LocalBackend:
    return LocalBackend(base_dir=tmp_path / "local", grace_s=1.0, gpus=list, any_command=True)


def all_lines(backend: LocalBackend, ref: WorkloadRef) -> list[str]:
    cursor, lines = None, []
    while True:
        chunk = backend.read_logs(ref=ref, cursor=cursor)
        lines.extend(chunk.lines)
        cursor = chunk.cursor
        if chunk.eof:
            return lines


def test_exit_codes_and_their_reasons(local: LocalBackend) -> None:
    ok = py_job("print('fine')", id="ok")
    bad = py_job("import sys; print('bad row 17'); sys.exit(3)", id="bad")
    killed = py_job("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", id="killed")
    for job in (ok, bad, killed):
        local.apply_job(job=job)
    done = finished(local, ok.ref)
    assert (done.phase, done.exit_code, done.reason) == (Phase.SUCCEEDED, 0, "exit code 0")
    assert done.started_at is not None and done.finished_at is not None
    assert done.started_at <= done.finished_at and done.run_uid
    failed = finished(local, bad.ref)
    assert (failed.phase, failed.exit_code, failed.reason) == (
        Phase.FAILED,
        3,
        "exit code 3: bad row 17",
    )
    assert finished(local, killed.ref).exit_code == 128 + signal.SIGKILL


def test_command_is_not_a_shell_and_sees_its_workspace(
    local: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", "panel-only")
    code = (
        "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(),"
        " 'env': {k: os.environ.get(k) for k in ('OUT', 'SECRET_KEY', 'AJUSTE_WORKSPACE',"
        " 'CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER')}}))"
    )
    job = py_job(
        code,
        "/workspace/data",
        "--out=/workspace/out",
        "$HOME; rm -rf /",
        env={"OUT": "/workspace/out"},
    )
    local.apply_job(job=job)
    assert finished(local, job.ref).phase is Phase.SUCCEEDED
    printed = (run_dir(local.base, job.ref) / "output.log").read_text()  # as the process saw it
    seen = json.loads(printed.splitlines()[0])
    workspace = str(run_dir(local.base, job.ref) / "root" / "workspace")
    assert seen == {
        "argv": [f"{workspace}/data", f"--out={workspace}/out", "$HOME; rm -rf /"],
        "cwd": workspace,
        "env": {
            "OUT": f"{workspace}/out",
            "SECRET_KEY": None,
            "AJUSTE_WORKSPACE": workspace,
            "CUDA_VISIBLE_DEVICES": "",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        },
    }


def test_the_log_and_the_failure_reason_show_workload_paths_not_this_machines(
    local: LocalBackend,
) -> None:
    """The process works in a directory of this machine; what it prints about its files reads
    as on a cluster (/workspace/...), so the panel never shows the machine's paths."""
    code = (
        "import json, os, sys; w = os.environ['AJUSTE_WORKSPACE']; print(json.dumps({"
        "'event': 'done', 'adapter_path': w + '/output/adapter', 'model': w}));"
        "print('[training] wrote', os.path.realpath(w + '/output'), w + 'x');"
        "sys.stdout.flush(); sys.exit(f'cannot read {w}/data/train.jsonl')"
    )
    job = py_job(code)
    local.apply_job(job=job)
    observed = finished(local, job.ref)
    host = str(run_dir(local.base, job.ref))
    assert observed.reason == "exit code 1: cannot read /workspace/data/train.jsonl"
    lines = all_lines(local, job.ref)
    assert json.loads(lines[0]) == {
        "event": "done",
        "adapter_path": "/workspace/output/adapter",
        "model": "/workspace",
    }
    # A longer name that only starts like the workspace is another path: left as it is.
    assert lines[1] == f"[training] wrote /workspace/output {host}/root/workspacex"
    assert all(host not in line for line in lines[:1] + lines[2:])


def test_a_project_secret_reaches_the_process_env_by_reference(local: LocalBackend) -> None:
    """ensure_project keeps the managers' secrets (0600, like the Kubernetes Secret); a job
    whose env references one gets its value, a deleted one fails the run with the reason."""
    local.ensure_project(
        project=ProjectRequest(
            slug="local", namespace=NS, gpu_quota=0, secrets={"hf_prod": "s3cr3t /workspace"}
        )
    )
    secrets = local.base / "projects" / NS / "ajuste-project-secrets.json"
    assert secrets.stat().st_mode & 0o777 == 0o600
    code = "import os; print(repr(os.environ.get('HF_TOKEN')), os.environ.get('PLAIN'))"
    job = py_job(code, env={"PLAIN": "x"}, secret_env={"HF_TOKEN": "hf_prod"})
    local.apply_job(job=job)
    assert finished(local, job.ref).phase is Phase.SUCCEEDED
    assert all_lines(local, job.ref) == ["'s3cr3t /workspace' x"]
    # the value is never written to the run's log or state, only to the 0600 plan
    run = run_dir(local.base, job.ref)
    assert "s3cr3t" not in (run / "state.json").read_text()

    local.ensure_project(project=ProjectRequest(slug="local", namespace=NS, gpu_quota=0))
    gone = py_job(code, id="2", secret_env={"HF_TOKEN": "hf_prod"})
    local.apply_job(job=gone)
    failed = finished(local, gone.ref)
    assert (failed.phase, failed.reason) == (
        Phase.FAILED,
        "the project has no secret named hf_prod",
    )


def test_logs_are_read_incrementally_without_duplicates(local: LocalBackend) -> None:
    code = (
        "import sys, time\n"
        "for i in range(40):\n"
        "    print(f'line {i}', flush=True); time.sleep(0.01)\n"
        "sys.stdout.write('partial'); sys.stdout.flush(); time.sleep(0.3); print(' end')"
    )
    job = py_job(code)
    local.apply_job(job=job)
    cursor, lines = None, []
    while True:
        chunk = local.read_logs(ref=job.ref, cursor=cursor, limit=7)
        assert len(chunk.lines) <= 7 and "partial" not in chunk.lines
        lines.extend(chunk.lines)
        cursor = chunk.cursor
        if chunk.eof:
            break
        time.sleep(0.02)
    assert lines == [f"line {i}" for i in range(40)] + ["partial end"]


def test_a_last_line_without_newline_ends_the_log(local: LocalBackend) -> None:
    code = (
        "import sys\n"
        "sys.stdout.write('epoch 1\\r\\n10%\\r50%\\r100%\\nfinal words'); sys.stdout.flush()"
    )
    job = py_job(code)
    local.apply_job(job=job)
    assert finished(local, job.ref).phase is Phase.SUCCEEDED
    cursor, lines = None, []
    for _ in range(5):  # a reader that never reaches eof fails here, not by hanging
        chunk = local.read_logs(ref=job.ref, cursor=cursor, limit=2)
        lines.extend(chunk.lines)
        cursor = chunk.cursor
        if chunk.eof:
            break
    assert chunk.eof and lines == ["epoch 1", "10%\r50%\r100%", "final words"]
    again = local.read_logs(ref=job.ref, cursor=cursor)
    assert (again.lines, again.cursor, again.eof) == ((), cursor, True)


def test_a_job_runs_below_the_panels_priority(local: LocalBackend) -> None:
    """A training that takes every core of `make run`'s machine leaves the panel the CPU first."""
    job = py_job("import os; print(os.nice(0))", id="nice")
    local.apply_job(job=job)
    assert wait_until(local, job.ref, lambda o: o.phase.is_final).phase is Phase.SUCCEEDED
    assert all_lines(local, job.ref) == [str(JOB_NICE)]


def test_stop_sends_sigterm_then_sigkill(local: LocalBackend) -> None:
    polite = py_job("import time; time.sleep(60)", id="polite")
    stubborn = py_job(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.1)",
        id="stubborn",
    )
    for job in (polite, stubborn):
        local.apply_job(job=job)
        running(local, job.ref)
    wait_until(local, stubborn.ref, lambda o: local.read_logs(ref=o.ref, cursor=None).lines != ())
    for job in (polite, stubborn):
        local.stop_job(job=job)
    first = finished(local, polite.ref)
    second = finished(local, stubborn.ref)
    assert (first.phase, first.exit_code) == (Phase.STOPPED, 128 + signal.SIGTERM)
    # SIGTERM first (the job heard it and carried on), then SIGKILL ended it
    assert (second.phase, second.exit_code) == (Phase.STOPPED, 128 + signal.SIGKILL)
    assert local.read_logs(ref=stubborn.ref, cursor=None).lines == ("ready", "got SIGTERM")


def test_timeout_fails_the_run(local: LocalBackend) -> None:
    job = py_job("import time; time.sleep(60)", timeout_s=1)
    local.apply_job(job=job)
    observed = finished(local, job.ref)
    assert (observed.phase, observed.timed_out, observed.reason) == (
        Phase.FAILED,
        True,
        "timed out after 1 s",
    )


def test_only_the_finetune_image_runs_here(local: LocalBackend) -> None:
    job = py_job("print(1)", image="registry.example/train:1.0")
    observed = local.apply_job(job=job)
    assert observed.phase is Phase.FAILED
    assert observed.reason.startswith("the image registry.example/train:1.0 needs the Kubernetes")


def test_gpu_flavors_wait_for_gpus_of_their_model(tmp_path: Path) -> None:
    none_here = LocalBackend(base_dir=tmp_path / "a", gpus=list, any_command=True)
    wanted = py_job("print(1)", flavor=H100)
    observed = none_here.apply_job(job=wanted)
    assert (observed.phase, observed.reason) == (
        Phase.PENDING,
        "this machine has no H100 GPU (h100-1-gpu needs 1); run it on the Kubernetes backend "
        "or pick the CPU flavor",
    )

    one_h100 = LocalBackend(
        base_dir=tmp_path / "b", gpus=lambda: [Gpu(0, "NVIDIA H100 80GB HBM3")], any_command=True
    )
    first = py_job(
        "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(60)",
        id="g1",
        flavor=H100,
    )
    second = py_job("print('second')", id="g2", flavor=H100)
    one_h100.apply_job(job=first)
    running(one_h100, first.ref)
    waiting = one_h100.apply_job(job=second)
    assert (waiting.phase, waiting.reason) == (
        Phase.PENDING,
        "waiting for 1 free H100 GPU(s): 0 free here",
    )
    one_h100.stop_job(job=first)
    finished(one_h100, first.ref)
    assert all_lines(one_h100, first.ref) == ["0"]
    one_h100.apply_job(job=second)  # the panel's reconcile tries again
    assert finished(one_h100, second.ref).phase is Phase.SUCCEEDED


def test_state_survives_a_panel_restart_and_a_lost_supervisor_is_an_error(tmp_path: Path) -> None:
    job = py_job("import time; time.sleep(60)")
    LocalBackend(base_dir=tmp_path, gpus=list, any_command=True).apply_job(job=job)
    restarted = LocalBackend(base_dir=tmp_path, gpus=list, any_command=True)  # a new panel process
    observed = running(restarted, job.ref)
    state = read_state(run_dir(tmp_path, job.ref))
    assert state is not None
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    os.killpg(state["child_pid"], signal.SIGKILL)
    lost = wait_until(restarted, job.ref, lambda o: o.phase is Phase.ERROR)
    assert lost.reason.startswith("the local supervisor (pid ")
    assert lost.run_uid == observed.run_uid


def test_concurrent_applies_start_one_process(local: LocalBackend) -> None:
    job = py_job("print('started once')")
    threads = [threading.Thread(target=local.apply_job, kwargs={"job": job}) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished(local, job.ref)
    local.apply_job(job=job)  # a late duplicate task: the run is over, nothing restarts
    assert all_lines(local, job.ref) == ["started once"]


def test_delete_kills_and_removes_everything(local: LocalBackend) -> None:
    job = py_job("import time; time.sleep(60)")
    local.apply_job(job=job)
    running(local, job.ref)
    state = read_state(run_dir(local.base, job.ref))
    assert state is not None
    local.delete_job(ref=job.ref)
    local.delete_job(ref=job.ref)
    assert local.observe_job(ref=job.ref).phase is Phase.GONE
    assert not run_dir(local.base, job.ref).exists()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(state["child_pid"]):
        time.sleep(0.05)
    assert not alive(state["child_pid"])


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_watch_yields_changes(local: LocalBackend) -> None:
    job = py_job("print(1)")
    stop = threading.Event()
    seen: list[Phase] = []

    def consume() -> None:
        for observed in local.watch(stop=stop):
            seen.append(observed.phase)
            if observed.phase.is_final:
                stop.set()

    local.apply_job(job=job)
    consumer = threading.Thread(target=consume)
    consumer.start()
    consumer.join(20)
    assert not consumer.is_alive() and seen[-1] is Phase.SUCCEEDED


@pytest.fixture
def panel_local(tmp_path: Path) -> LocalBackend:
    """The local backend as the panel builds it: presets only."""
    return LocalBackend(base_dir=tmp_path / "panel", grace_s=1.0, gpus=list)


PRESET = ("python", "-m", "training.finetune", "--model", "/workspace/model")
PRESET_IO = ("--data", "/workspace/data", "--output", "/workspace/output")


@pytest.mark.parametrize(
    ("command", "env", "why"),
    [
        (("python", "-c", "open('/tmp/x','w')"), {}, "runs only the fine-tune preset"),
        (("bash", "-c", "id"), {}, "runs only the fine-tune preset"),
        (("python", "-m", "http.server"), {}, "runs only the fine-tune preset"),
        ((*PRESET, *PRESET_IO), {"PYTHONPATH": "/workspace/data"}, "set PYTHONPATH"),
        ((*PRESET, *PRESET_IO), {"LD_PRELOAD": "/workspace/data/x.so"}, "set LD_PRELOAD"),
        ((*PRESET, *PRESET_IO, "--trust-remote-code"), {}, "does not run model code"),
        ((*PRESET, "--data", "/etc", "--output", "/workspace/o"), {}, "--data must be a path"),
        ((*PRESET, "--data", "/workspace/d", "--output", "/workspace/../x"), {}, "--output"),
        (
            ("python", "-m", "training.finetune", "--model", "../../.ssh", *PRESET_IO),
            {},
            "--model must be a path under /workspace",
        ),
    ],
)
def test_the_panels_local_backend_runs_only_the_preset(
    panel_local: LocalBackend, tmp_path: Path, command: tuple[str, ...], env: dict, why: str
) -> None:
    """Through the custom tab, any member could run anything as the panel's OS user."""
    job = py_job("", command=command, env=env, id=str(abs(hash(command + tuple(env)))))
    observed = panel_local.apply_job(job=job)
    assert observed.phase is Phase.FAILED, observed
    assert why in observed.reason
    assert not (tmp_path / "x").exists()


def test_the_presets_own_commands_pass(panel_local: LocalBackend) -> None:
    from deploy.local.plan import preset_problem

    assert preset_problem((*PRESET, *PRESET_IO, "--rank", "8"), {"HF_HUB_OFFLINE": "1"}) is None
    hub = ("python", "-m", "training.finetune", "--model", "org/model-7b", *PRESET_IO)
    assert preset_problem(hub, {"WANDB_MODE": "offline"}) is None
    assert preset_problem(("--help",), {}) is not None  # argparse would exit the panel
    # Through the backend it starts (and fails on its own: there is no data here).
    job = py_job("", command=(*PRESET, *PRESET_IO), id="preset")
    panel_local.apply_job(job=job)
    observed = finished(panel_local, job.ref)
    assert "local backend" not in observed.reason and "exit code" in observed.reason, observed
