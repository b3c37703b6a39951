"""The settings `make run` gives its processes, kept in `var/run.env` so that
`python manage.py ...` in the same checkout reaches the same secret key, database, Redis and
object store without anything exported (the README's commands work as written).

No Django here: `manage.py` loads it before the settings are read. What the shell exports wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

FILE_NAME = "run.env"
# Only what decides where the data is and how it is signed; never the user's own variables.
KEYS = (
    "AJUSTE_VAR_DIR",
    "DEBUG",
    "HTTPS",
    "ALLOWED_HOSTS",
    "SITE_URL",
    "COMPUTE_BACKEND",
    "SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "REDIS_KEY_PREFIX",
    "S3_ENDPOINT_URL",
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
    "S3_REGION",
    "S3_ALIAS",
    "S3_CORS_ORIGINS",
    "S3_CREDENTIAL_MODE",
    "EMAIL_BACKEND",
    "EMAIL_FILE_PATH",
    "STATIC_COMPRESS",
    # Only when make run was started with it: `manage.py migrate` then agrees (ajuste.E001).
    "AJUSTE_LOCAL_BACKEND_TRUSTED",
)


def write_private(path: Path, text: str) -> None:
    """Write a secret readable by its owner only, from the first byte (never chmod-ed after)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    path.chmod(0o600)  # an older file of ours may predate the mode


def private_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret kept in `path`, made once by `make()`."""
    if not path.exists():
        write_private(path, make())
    return path.read_text().strip()


def save_run_env(var: Path, env: dict[str, str]) -> Path:
    """Write the settings `make run` chose (owner-only: it holds the secret key)."""
    path = var / FILE_NAME
    write_private(path, "".join(f"{key}={env[key]}\n" for key in KEYS if env.get(key) is not None))
    return path


def load_run_env(root: Path) -> None:
    """Default the environment to what the last `make run` of this checkout used, if any."""
    var = Path(os.environ.get("AJUSTE_VAR_DIR") or root / "var")
    try:
        text = (var / FILE_NAME).read_text()
    except OSError:
        return
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in KEYS:
            os.environ.setdefault(key, value)
