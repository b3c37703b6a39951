"""`make run` skips its preparation's process when nothing it looks at changed (#32), and only
then: a new or edited migration, a static source, the database's applied migrations, its
accounts or the environment each bring the preparation back; a migration unapplied since is
applied by the next start."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlpanel.localrun import unchanged

ROOT = Path(__file__).resolve().parents[3]


def _env(var: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AJUSTE_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    env |= {"AJUSTE_VAR_DIR": str(var), "COMPUTE_BACKEND": "local", "DEBUG": "0"}
    env |= {"ALLOWED_HOSTS": "127.0.0.1,localhost", "STATIC_COMPRESS": "0", "SECRET_KEY": "x" * 50}
    return env


def _prepare(var: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "controlpanel.localrun.prepare"],
        env=_env(var), cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A var/ that make run's preparation prepared (migrations of an empty SQLite, the admin)."""
    var = tmp_path_factory.mktemp("prepared") / "var"
    _prepare(var)
    return var


@pytest.fixture
def var(prepared: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "var"
    shutil.copytree(prepared, copy)
    return copy


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A checkout's sources, small: one app's migrations, the static folder, a collection."""
    tree = tmp_path / "checkout"
    for name in ("app/migrations/0001_initial.py", "static/site.css", "app/views.py"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("# one\n")
    (tree / unchanged.COLLECTED).parent.mkdir(parents=True)
    (tree / unchanged.COLLECTED).write_text("fingerprint-1")
    yield tree


def _later(path: Path, text: str) -> None:
    path.write_text(text)
    later = path.stat().st_mtime + 60
    os.utime(path, (later, later))


def _sql(var: Path, statement: str) -> None:
    with sqlite3.connect(var / "ajuste.sqlite3") as db:
        db.execute(statement)
    db.close()


def test_the_preparations_stamp_lets_the_next_start_skip_it(prepared: Path) -> None:
    # What prepare stamped (its own process, Django's settings) is what run.py compares with.
    kept = unchanged.skip(ROOT, prepared, _env(prepared))
    assert kept is not None
    assert kept.admin == "admin"
    assert kept.demo_wanted  # nothing filled the demo bucket: make run asks for it again
    assert (
        unchanged.skip(ROOT, prepared, _env(prepared) | {"COMPUTE_BACKEND": "kubernetes"}) is None
    )


def test_a_new_or_edited_migration_brings_the_preparation_back(var: Path, root: Path) -> None:
    env = _env(var)
    unchanged.record(root, var, env)
    assert unchanged.skip(root, var, env) is not None
    _later(root / "app/views.py", "# not a migration\n")
    assert unchanged.skip(root, var, env) is not None  # other sources do not count
    (root / "app/migrations/0002_more.py").write_text("# two\n")
    assert unchanged.skip(root, var, env) is None
    unchanged.record(root, var, env)
    assert unchanged.skip(root, var, env) is not None
    _later(root / "app/migrations/0001_initial.py", "# one, edited\n")
    assert unchanged.skip(root, var, env) is None


def test_a_static_source_or_another_collection_brings_the_preparation_back(
    var: Path, root: Path
) -> None:
    env = _env(var)
    unchanged.record(root, var, env)
    _later(root / "static/site.css", "body { color: navy }\n")
    assert unchanged.skip(root, var, env) is None
    unchanged.record(root, var, env)
    (root / "static/new.js").write_text("")
    assert unchanged.skip(root, var, env) is None
    unchanged.record(root, var, env)
    (root / unchanged.COLLECTED).unlink()  # the collection was removed
    assert unchanged.skip(root, var, env) is None


def test_the_databases_migrations_and_accounts_bring_the_preparation_back(
    var: Path, root: Path
) -> None:
    env = _env(var)
    unchanged.record(root, var, env)
    _sql(var, "DELETE FROM django_migrations WHERE app = 'dashboards' AND name LIKE '0004%'")
    assert unchanged.skip(root, var, env) is None
    unchanged.record(root, var, env)
    _sql(var, "UPDATE accounts_user SET is_active = 0")  # the trust check counts active ones
    assert unchanged.skip(root, var, env) is None
    unchanged.record(root, var, env)
    _sql(var, "UPDATE accounts_user SET is_superuser = 0")  # bootstrap would make an admin
    assert unchanged.skip(root, var, env) is None
    unchanged.record(root, var, env)  # no admin: nothing is stamped, the next start prepares
    assert not (var / "run" / unchanged.STAMP).exists()


def test_the_environment_or_another_database_brings_the_preparation_back(
    var: Path, root: Path
) -> None:
    env = _env(var)
    unchanged.record(root, var, env)
    for name, value in [
        ("AJUSTE_LOCAL_BACKEND_TRUSTED", "1"),
        ("ALLOWED_HOSTS", "panel.example.com"),
        ("STATIC_COMPRESS", "1"),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1/ajuste"),
    ]:
        assert unchanged.skip(root, var, env | {name: value}) is None, name
    (var / "ajuste.sqlite3").unlink()
    assert unchanged.skip(root, var, env) is None


@pytest.mark.slow
def test_a_migration_unapplied_since_is_applied_by_the_next_start(var: Path) -> None:
    env = _env(var)
    unchanged.record(ROOT, var, env)  # this copy's folder, as prepare would stamp it
    assert unchanged.skip(ROOT, var, env) is not None
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "dashboards", "0003", "--noinput", "-v0"],
        env=env, cwd=ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert unchanged.skip(ROOT, var, env) is None
    said = _prepare(var)
    assert "• applying database migrations" in said
    with sqlite3.connect(var / "ajuste.sqlite3") as db:
        names = {name for (name,) in db.execute("SELECT name FROM django_migrations")}
    db.close()
    assert "0004_wait_histogram_by_owner_flavor" in names
    assert unchanged.skip(ROOT, var, env) is not None
