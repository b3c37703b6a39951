"""Collected only when named on the command line: test_sqlite.py runs it in the SQLite session,
so that session proves it really ran on SQLite."""

from django.db import connection


def test_this_session_runs_on_sqlite() -> None:
    assert connection.vendor == "sqlite"
