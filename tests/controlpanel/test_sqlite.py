"""`make run` keeps its data in an embedded SQLite (production and the rest of the suite use
PostgreSQL): the tests of what behaves differently between the two — JSON lookups on job labels
(`contains` does not exist on SQLite: the label filter answered 500 there) — run again, in a
pytest session of their own on SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ON_SQLITE = [
    "tests/controlpanel/sqlite_checks.py",  # the session's database is SQLite indeed
    "tests/controlpanel/jobs/test_list_filters.py",  # API, page and selector, hypothesis
    "tests/controlpanel/jobs/test_cli_jobs.py::test_list_by_label",  # the CLI against it
    # The dashboard's numbers: exact waits in Python (no percentile_cont), the wait histograms,
    # workload spans and expression indexes.
    "tests/controlpanel/dashboards/test_dashboard.py",
]


@pytest.mark.slow
def test_the_label_filter_and_its_neighbours_pass_on_sqlite(tmp_path: Path) -> None:
    env = os.environ | {"AJUSTE_TEST_DATABASE_URL": f"sqlite:///{tmp_path}/ajuste"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *ON_SQLITE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary, summary
