"""Whether `make run`'s preparation may be skipped: nothing it looks at changed since the last
one that succeeded (#32: a second start paid a whole Django start, 4-6 s on a busy machine, to
find nothing to do, and gunicorn's master then paid another).

Read without Django, in make run's own process, in a few milliseconds:

- the files: every migration and static source of this checkout (name, size, mtime), the
  installed packages (site-packages' and node_modules' mtimes change with any install), the
  static collection's own fingerprint (prepare.STAMP) and the Python version;
- the environment the preparation reads (backend, trust, hosts, database, static settings);
- the embedded SQLite database, in one query: the applied migrations, the active accounts (the
  trust check counts them) and the first admin (bootstrap makes one when none); and whether the
  demo project lacks its bucket (a first start stopped before its fill ended): that is asked
  for again (var/run/demo-wanted) either way.

`prepare` writes the digest of all that to var/run/prepared when it succeeds; the next start
skips it when the digest is the same. A panel on DATABASE_URL (PostgreSQL) always prepares.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

STAMP = "prepared"  # in var/run/
SCANNED = ("migrations", "static")  # folders whose files the preparation applies or collects
PRUNED = {"node_modules", "var", "tests", "__pycache__", "bench", "docs"}
ENV_READ = (
    *("COMPUTE_BACKEND", "AJUSTE_LOCAL_BACKEND_TRUSTED", "ALLOWED_HOSTS", "DATABASE_URL"),
    *("STATIC_COMPRESS", "DEBUG", "AJUSTE_VAR_DIR"),
)
COLLECTED = Path("var") / "staticfiles" / ".ajuste-collected"  # settings.STATIC_ROOT's stamp
STATE = """
SELECT
  (SELECT group_concat(app || '.' || name, ',')
     FROM (SELECT app, name FROM django_migrations ORDER BY app, name)),
  (SELECT count(*) FROM accounts_user WHERE is_active),
  (SELECT username FROM accounts_user WHERE is_superuser ORDER BY id LIMIT 1),
  (SELECT count(*) FROM projects_project p WHERE p.slug = 'demo' AND NOT EXISTS (
     SELECT 1 FROM buckets_bucket b WHERE b.project_id = p.id AND b.name = 'demo'))
"""


def _sources(root: Path) -> Iterator[str]:
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in PRUNED and not d.startswith("."))
        relative = Path(top).relative_to(root)
        if not any(part in SCANNED for part in relative.parts):
            continue
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            info = os.stat(os.path.join(top, name))
            yield f"{relative / name}\0{info.st_size}\0{info.st_mtime_ns}"


def _mtime(path: Path) -> str:
    try:
        return str(path.stat().st_mtime_ns)
    except OSError:
        return "-"


@dataclass(frozen=True)
class State:
    digest: str  # of everything the preparation looks at
    admin: str  # the first admin's name, said at each start
    demo_wanted: bool  # the demo project lacks its bucket


def _database(env: Mapping[str, str]) -> tuple[str, str, bool] | None:
    """(the state's text, the admin's name, the demo wanted); None when the preparation must
    run."""
    if env.get("DATABASE_URL") or not env.get("AJUSTE_VAR_DIR"):
        return None
    path = Path(env["AJUSTE_VAR_DIR"]) / "ajuste.sqlite3"
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            applied, active, admin, demo_wanted = db.execute(STATE).fetchone()
    except sqlite3.Error:  # not migrated, or a schema this query does not know: prepare
        return None
    if not applied or admin is None:
        return None
    return f"{applied}\0{active}\0{admin}", str(admin), bool(demo_wanted)


def state(root: Path, env: Mapping[str, str]) -> State | None:
    """What the preparation looks at; None when it cannot be told without the preparation."""
    found = _database(env)
    if found is None:
        return None
    text, admin, demo_wanted = found
    sha = hashlib.sha256(f"{sys.version}\0{text}\n".encode())
    for name in ENV_READ:
        sha.update(f"{name}={env.get(name, '')}\n".encode())
    packages = Path(sysconfig.get_paths()["purelib"])
    for path in (packages, root / "node_modules", root / "node_modules" / ".package-lock.json"):
        sha.update(f"{path}\0{_mtime(path)}\n".encode())
    collected = root / COLLECTED
    sha.update((collected.read_bytes() if collected.exists() else b"-") + b"\n")
    for line in _sources(root):
        sha.update(line.encode() + b"\n")
    return State(sha.hexdigest(), admin, demo_wanted)


def skip(root: Path, var: Path, env: Mapping[str, str]) -> State | None:
    """What the last preparation left, when nothing changed since; else None."""
    stamp = var / "run" / STAMP
    if not stamp.exists():
        return None
    now = state(root, env)
    return now if now is not None and stamp.read_text() == now.digest else None


def record(root: Path, var: Path, env: Mapping[str, str]) -> None:
    """After a preparation that succeeded: what the next start compares with."""
    stamp = var / "run" / STAMP
    now = state(root, env)
    if now is None:
        stamp.unlink(missing_ok=True)
        return
    stamp.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp.write_text(now.digest)
