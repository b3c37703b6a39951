"""`ajuste usage` against a live panel with a real token: the rows of /api/v1/usage/ as a
table or JSON, with the same filters; a bad filter is the API's own words."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.engine.models import Workload
from tests.fixtures.cli import cli_as, ok_json

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(live_server: Any, owner: Any) -> Any:
    return cli_as(owner, live_server.url)


def test_usage_by_month_as_json_and_table(run: Any, january: dict[str, Workload]) -> None:
    rows = ok_json(run("usage", "--month", "2025-01", "-o", "json"))
    assert sorted((r["workload_name"], r["minutes"], r["amount"]) for r in rows) == [
        ("nb-b", 10, "0.47"),
        ("prep", 60, "0.60"),
        ("train-a", 31, "2.89"),
    ]
    assert {r["project"] for r in rows} == {"alpha"}
    table = run("usage", "--month", "2025-01")
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == [
        "PERIOD",
        "PROJECT",
        "USER",
        "WORKLOAD",
        "NAME",
        "KIND",
        "FLAVOR",
        "MINUTES",
        "GPU-H",
        "AMOUNT",
        "CURRENCY",
        "EST",
    ]
    train = next(line for line in lines if "train-a" in line).split()
    short = str(january["train-a"].pk)[:8]
    assert train[:10] == [
        "2025-01",
        "alpha",
        "owner",
        short,
        "train-a",
        "job",
        "test-gpu",
        "31",
        "1.03",
        "2.89",
    ]


def test_usage_filters_and_days(run: Any, january: dict[str, Workload]) -> None:
    days = ok_json(
        run(
            "usage",
            "--user",
            "member",
            "--start",
            "2025-01-31",
            "--end",
            "2025-02-01",
            "--group",
            "day",
            "-o",
            "json",
        )
    )
    assert [(r["period"], r["workload_name"], r["minutes"]) for r in days] == [
        ("2025-01-31", "nb-b", 10),
        ("2025-02-01", "nb-b", 10),
    ]
    cpu = ok_json(run("usage", "--month", "2025-01", "--flavor", "test-cpu", "-o", "json"))
    assert [r["workload_name"] for r in cpu] == ["prep"]
    one = ok_json(
        run("usage", "--month", "2025-01", "--workload", str(january["nb-b"].pk), "-o", "json")
    )
    assert [(r["workload_name"], r["kind"]) for r in one] == [("nb-b", "notebook")]
    # --all: every project the caller may read; the owner manages alpha only
    every = ok_json(run("usage", "--all", "--month", "2025-01", "-o", "json"))
    assert {r["project"] for r in every} == {"alpha"}


def test_a_bad_filter_is_the_apis_own_words(run: Any) -> None:
    result = run("usage", "--month", "2025-13")
    assert result.exit_code == 1
    assert "HTTP 400: month: '2025-13' is not a month: write it YYYY-MM" in result.output
    bad_group = run("usage", "--group", "week")
    assert bad_group.exit_code == 2 and "'week' is not one of 'month', 'day'" in bad_group.output
