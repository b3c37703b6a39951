"""`make run`'s object store: when S3_ENDPOINT_URL is unset, start the embedded S3 server
(storage/embedded.py, s3rver) on loopback over var/s3 and point the default datastore
(`LOCAL`) at it for web, worker and beat. No Django here: controlpanel/run.py calls it
before Django starts.

Two steps, so that make run can say everything its processes need before anything starts:
`plan_object_store` writes the settings into the environment (the port is chosen, the keys
are known), `start_object_store` starts the server and says where it is."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from controlpanel.runenv import private_secret
from storage.embedded import DEFAULT_ACCESS_KEY, start_embedded_s3

PORT = int(os.environ.get("AJUSTE_S3_PORT") or 9100)
HOST = "127.0.0.1"


def _secret(var: Path) -> str:
    return private_secret(var / "s3_secret_key", lambda: secrets.token_urlsafe(32))


def _origins(env: dict[str, str]) -> list[str]:
    site = env.get("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
    both = [site, site.replace("127.0.0.1", "localhost"), site.replace("localhost", "127.0.0.1")]
    return list(dict.fromkeys(both))


def plan_object_store(var: Path, env: dict[str, str], port: int = 0) -> bool:
    """Point the default datastore at the embedded store on `port` (PORT when 0); False when
    S3_ENDPOINT_URL names another store (nothing to start)."""
    if env.get("S3_ENDPOINT_URL"):
        return False
    env.update(
        AJUSTE_S3_PORT=str(port or PORT),
        S3_ENDPOINT_URL=f"http://{HOST}:{port or PORT}",
        S3_ACCESS_KEY=DEFAULT_ACCESS_KEY,
        S3_SECRET_KEY=_secret(var),
        S3_REGION="us-east-1",
        S3_ALIAS="LOCAL",
        # pods (local processes) get per-project keys the store issues, never its root key
        S3_CREDENTIAL_MODE="embedded-scoped",
    )
    # Browser uploads come from the panel's own address (SITE_URL follows the chosen port).
    env.setdefault("S3_CORS_ORIGINS", ",".join(_origins(env)))
    return True


def start_object_store(var: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start the store `plan_object_store` planned; the process and the line that says where
    it is and how to reach it with boto3 or the AWS CLI."""
    port = int(env["AJUSTE_S3_PORT"])
    server = start_embedded_s3(
        directory=var / "s3",
        port=port,
        host=HOST,
        access_key=env["S3_ACCESS_KEY"],
        secret_key=env["S3_SECRET_KEY"],
        cors_origins=env["S3_CORS_ORIGINS"].split(","),
        log_path=var / "s3.log",
    )
    said = (
        f"• embedded object store on {server.endpoint_url} (data in {var / 's3'}; for boto3 or "
        f"the AWS CLI: access key {DEFAULT_ACCESS_KEY}, secret key in {var / 's3_secret_key'})"
    )
    return server.process, said
