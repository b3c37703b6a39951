"""`make run`'s preparation: the local backend's refusal said first, alone and with the one-line
fix; migrations and static files only when something changed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from controlpanel.localrun import prepare


@pytest.fixture
def local_backend(settings: Any) -> None:
    settings.COMPUTE_BACKEND, settings.AJUSTE_LOCAL_BACKEND_TRUSTED = "local", False
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]


def test_a_second_active_user_is_said_with_the_one_line_fix(
    local_backend: None, owner: Any, member: Any
) -> None:
    message = prepare.trust_problem()
    assert message is not None
    first, *rest = message.splitlines()
    assert first.startswith("make run: the local backend runs every job and notebook as this")
    assert "2 active users" in first
    assert "      AJUSTE_LOCAL_BACKEND_TRUSTED=1 make run" in rest  # alone on its line
    assert "migrate" not in message and "W040" not in message
    member.is_active = False
    member.save()
    assert prepare.trust_problem() is None


def test_migrations_run_only_when_some_are_missing(db: Any) -> None:
    assert prepare.migrate_if_needed() is False  # the test database is migrated


def test_static_files_are_collected_again_only_when_a_source_changed(
    settings: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "src"
    mine.mkdir()
    (mine / "extra.css").write_text("body { color: black }")
    settings.STATICFILES_DIRS = [*settings.STATICFILES_DIRS, str(mine)]
    settings.STATIC_ROOT = str(tmp_path / "static")
    assert prepare.collect_if_changed() is True
    assert (tmp_path / "static" / prepare.STAMP).exists()
    assert prepare.collect_if_changed() is False  # a second start copies nothing
    edited = mine / "extra.css"
    edited.write_text("body { color: navy }")
    # An edit comes later than the last collection; collectstatic compares whole seconds, so
    # the edit is dated a minute on rather than made within the same second.
    later = edited.stat().st_mtime + 60
    os.utime(edited, (later, later))
    assert prepare.collect_if_changed() is True  # an edited file is collected again
    assert (tmp_path / "static" / "extra.css").read_text() == "body { color: navy }"
    (mine / "new.js").write_text("")
    assert prepare.collect_if_changed() is True  # so is a new one
    assert capsys.readouterr().out.count("• collecting static files") == 3
