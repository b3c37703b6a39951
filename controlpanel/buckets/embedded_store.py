"""`make run`'s object store: when S3_ENDPOINT_URL is unset, start the embedded S3 server
(storage/embedded.py, s3rver) on loopback over var/s3 and point the default datastore
(`LOCAL`) at it for web, worker and beat. No Django here: controlpanel/run.py calls it
before Django starts."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path

from controlpanel.runenv import private_secret
from storage.embedded import DEFAULT_ACCESS_KEY, start_embedded_s3

PORT = int(os.environ.get("AJUSTE_S3_PORT") or 9100)
HOST = "127.0.0.1"


def _secret(var: Path) -> str:
    return private_secret(var / "s3_secret_key", lambda: secrets.token_urlsafe(32))


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def start_object_store(var: Path, env: dict[str, str], children: list[subprocess.Popen]) -> None:
    """Hook for controlpanel.run._EMBEDDED_SERVICES: (var dir, child env, child processes)."""
    if env.get("S3_ENDPOINT_URL"):
        return
    if _port_taken(PORT):
        raise SystemExit(f"port {PORT} is taken: stop what uses it, or set S3_ENDPOINT_URL")
    site = env.get("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
    origins = [site, site.replace("127.0.0.1", "localhost"), site.replace("localhost", "127.0.0.1")]
    print(
        f"• starting the embedded object store on http://{HOST}:{PORT} (data in {var / 's3'};"
        f" for boto3 or the AWS CLI: access key {DEFAULT_ACCESS_KEY}, secret key in"
        f" {var / 's3_secret_key'})"
    )
    server = start_embedded_s3(
        directory=var / "s3",
        port=PORT,
        host=HOST,
        access_key=DEFAULT_ACCESS_KEY,
        secret_key=_secret(var),
        cors_origins=list(dict.fromkeys(origins)),
        log_path=var / "s3.log",
    )
    children.append(server.process)
    env.update(
        S3_ENDPOINT_URL=server.endpoint_url,
        S3_ACCESS_KEY=server.access_key,
        S3_SECRET_KEY=server.secret_key,
        S3_REGION="us-east-1",
        S3_ALIAS="LOCAL",
        # pods (local processes) get per-project keys the store issues, never its root key
        S3_CREDENTIAL_MODE="embedded-scoped",
    )
    env.setdefault("S3_CORS_ORIGINS", ",".join(dict.fromkeys(origins)))
