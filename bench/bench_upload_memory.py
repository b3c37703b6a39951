"""Memory stays flat while a 1 GiB file is uploaded through the API path.

Starts the embedded S3 server and the panel's web process (gunicorn, as in the Procfile, over a
throw-away SQLite database), creates a token and a bucket, then runs `ajuste bucket object
upload` (the CLI: multipart through presigned URLs, bytes straight to S3) for a 1 MiB and a
1 GiB file, sampling the peak RSS of the web worker and of the CLI process every 20 ms:

    .venv/bin/python bench/bench_upload_memory.py [--size-mib 1024]

"Flat" means the 1 GiB upload costs the CLI and the web worker no more memory than the 1 MiB
one (give or take a few MiB), i.e. neither ever holds the file. Needs Redis on loopback
(`make services`), like `make run`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PeakRss:
    """Samples the RSS of the processes `pick()` returns, keeping the peak of their sum."""

    def __init__(self, pick: Callable[[], list[psutil.Process]]) -> None:
        self.pick, self.peak, self._stop = pick, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for process in self.pick():
                with contextlib.suppress(psutil.Error):
                    total += process.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def panel_env(var: Path, s3: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update(
        AJUSTE_VAR_DIR=str(var),
        DEBUG="0",
        HTTPS="0",
        SECRET_KEY=secrets.token_urlsafe(40),
        ALLOWED_HOSTS="127.0.0.1",
        REDIS_URL=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11"),
        S3_ENDPOINT_URL=s3.endpoint_url,
        S3_ACCESS_KEY=s3.access_key,  # type: ignore[attr-defined]
        S3_SECRET_KEY=s3.secret_key,
        S3_ALIAS="LOCAL",
        STATIC_MANIFEST="0",  # type: ignore[attr-defined]
        DJANGO_SUPERUSER_USERNAME="bench",
        DJANGO_SUPERUSER_PASSWORD=secrets.token_urlsafe(12),
        PYTHONUNBUFFERED="1",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def start_web(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    web = subprocess.Popen(
        [
            gunicorn,
            "controlpanel.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--threads",
            "8",
            "--timeout",
            "120",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return web
        time.sleep(0.2)
    web.kill()
    raise SystemExit("the web process did not start")


def upload(cli_env: dict[str, str], path: Path, web: psutil.Process) -> dict[str, float]:
    """Run the CLI upload; return its seconds and the peak RSS (MiB) of the CLI and web."""
    command = [
        sys.executable,
        "-m",
        "controlpanel.cli.main",
        "bucket",
        "object",
        "upload",
        "bench-data",
        str(path),
    ]
    started = time.monotonic()
    cli = subprocess.Popen(command, cwd=REPO, env=cli_env, stdout=subprocess.DEVNULL)
    cli_process = psutil.Process(cli.pid)
    with (
        PeakRss(lambda: [cli_process]) as cli_peak,
        PeakRss(lambda: web.children(recursive=True)) as web_peak,
    ):
        if cli.wait() != 0:
            raise SystemExit(f"upload of {path} failed")
    return {
        "seconds": time.monotonic() - started,
        "cli": cli_peak.peak / MiB,
        "web": web_peak.peak / MiB,
    }


def write_file(path: Path, size: int) -> None:
    block = os.urandom(8 * MiB)
    with path.open("wb") as handle:
        for offset in range(0, size, len(block)):
            handle.write(block[: min(len(block), size - offset)])


def run(size_mib: int) -> None:
    from storage.embedded import start_embedded_s3
    from storage.objects import head_object

    with tempfile.TemporaryDirectory(prefix="ajuste-bench-") as tmp:
        root = Path(tmp)
        s3 = start_embedded_s3(directory=root / "s3", port=free_port())
        env = panel_env(root / "var", s3)
        web = None
        try:
            manage(env, "migrate", "--noinput", "-v", "0")
            manage(env, "bootstrap")
            token = manage(env, "apitoken", "bench").strip().splitlines()[-1]
            port = free_port()
            web = start_web(env, port)
            cli_env = dict(
                env,
                AJUSTE_URL=f"http://127.0.0.1:{port}",
                AJUSTE_TOKEN=token,
                AJUSTE_PROJECT="demo",
            )
            subprocess.run(
                [sys.executable, "-m", "controlpanel.cli.main", "bucket", "create", "bench-data"],
                cwd=REPO,
                env=cli_env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            small, big = root / "small.bin", root / "big.bin"
            write_file(small, MiB)
            write_file(big, size_mib * MiB)
            master = psutil.Process(web.pid)
            upload(cli_env, small, master)  # warm-up: imports, connections
            base = upload(cli_env, small, master)
            large = upload(cli_env, big, master)
            stored = head_object(s3.config(), bucket="bench-data", key="big.bin").size
            report(size_mib, base, large, stored == size_mib * MiB)
        finally:
            if web is not None:
                web.terminate()
                web.wait(20)
            s3.stop()
            _drain(env["REDIS_URL"])


def _drain(url: str) -> None:
    """Drop the usage-recount messages no worker consumed during the bench."""
    import redis

    redis.Redis.from_url(url).delete("celery")


def report(size_mib: int, base: dict[str, float], large: dict[str, float], ok: bool) -> None:
    rate = size_mib / large["seconds"]
    print(
        f"upload of {size_mib} MiB via `ajuste bucket object upload` (presigned URLs, "
        "16 MiB parts): "
        f"{large['seconds']:.1f} s, {rate:.1f} MiB/s, stored intact: {ok}"
    )
    print(f"{'':24}{'1 MiB upload':>16}{f'{size_mib} MiB upload':>18}{'difference':>12}")
    for label, key in (("peak RSS, CLI process", "cli"), ("peak RSS, web worker", "web")):
        print(
            f"{label:24}{base[key]:>12.1f} MiB{large[key]:>14.1f} MiB"
            f"{large[key] - base[key]:>+8.1f} MiB"
        )
    flat = all(large[k] - base[k] < 32 for k in ("cli", "web"))
    print("memory flat (each grows by < 32 MiB):", "yes" if flat and ok else "NO")
    if not (flat and ok):
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    run(parser.parse_args().size_mib)


if __name__ == "__main__":
    main()
