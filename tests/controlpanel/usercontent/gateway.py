"""The user-content gateway as the image runs it, on loopback: Debian's nginx started through
the image's own entry point (images/gateway/ajuste-gateway) and template, asking a panel on
loopback. .ci/run installs nginx-light; without nginx the tests say so and fail."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ENTRY = ROOT / "images" / "gateway" / "ajuste-gateway"
TEMPLATE = ROOT / "images" / "gateway" / "nginx.conf.template"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Gateway:
    port: int
    health_port: int
    run_dir: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        path = self.run_dir / "gateway.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def start_gateway(panel_url: str, port: int | None = None, **knobs: str) -> Gateway:
    """nginx serving content hosts on `port` (a free one by default), asking `panel_url`;
    `knobs`: more of the entry point's settings (AJUSTE_GATEWAY_RATE=...)."""
    if shutil.which("nginx") is None:
        raise RuntimeError("nginx is not installed: apt-get install -y nginx-light (.ci/run does)")
    # nginx's workers run as nobody when started by root: their directory must be theirs to use.
    run_dir = Path(tempfile.mkdtemp(prefix="ajuste-gateway-"))
    run_dir.chmod(0o755)
    port = port or free_port()
    health = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "AJUSTE_PANEL_URL": panel_url,
        "AJUSTE_GATEWAY_PORT": str(port),
        "AJUSTE_GATEWAY_HEALTH_PORT": str(health),
        "AJUSTE_GATEWAY_RESOLVER": "127.0.0.1",
        "AJUSTE_GATEWAY_RUN_DIR": str(run_dir),
        "AJUSTE_GATEWAY_TEMPLATE": str(TEMPLATE),
        **knobs,
    }
    log = (run_dir / "gateway.log").open("ab")
    process = subprocess.Popen(
        ["sh", str(ENTRY)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    gateway = Gateway(port=port, health_port=health, run_dir=run_dir, process=process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the gateway exited {process.returncode}:\n{gateway.log()}")
        try:
            with socket.create_connection(("127.0.0.1", health), timeout=1):
                return gateway
        except OSError:
            time.sleep(0.1)
    gateway.stop()
    raise RuntimeError(f"the gateway did not listen within 30 s:\n{gateway.log()}")
