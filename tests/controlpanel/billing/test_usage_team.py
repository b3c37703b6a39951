"""The teams' side of billing: a manager's usage page (the month by user, workload and flavor
from the ledger's lines, the budget, its forecast and alerts, the budget form) and
`/api/v1/usage/` (filters, grouping, scoping, precise 400s); `ajuste usage` in
test_cli_usage.py."""

from __future__ import annotations

import html
import re
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.billing.models import BudgetAlert, Line
from controlpanel.billing.rules import month_of, month_start
from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from tests.controlpanel.billing.conftest import CUR, ran
from tests.fixtures.panel import api_client_for, logged_in


def test_the_lines_are_what_the_page_adds_up(
    january: dict[str, Workload], project: Project
) -> None:
    """The figures below come from real ledger lines, written by the receivers."""
    lines = Line.objects.filter(project=project, period=datetime(2025, 1, 1).date())
    assert sorted((ln.run.job.name, ln.minutes, ln.units) for ln in lines) == [
        ("nb-b", 10, 1),
        ("prep", 60, 1),
        ("train-a", 31, 2),
    ]


# --- the page ---------------------------------------------------------------------------


def cells(body: str, testid: str) -> str:
    """What the element with this data-testid holds up to its table's (or list's) end, as
    text without tags and with single spaces (for simple `in` checks)."""
    start = body.index(f'data-testid="{testid}"')
    ends = [i for i in (body.find("</table>", start), body.find("</dl>", start)) if i >= 0]
    part = body[start : min(ends)]
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", part).split()))


def test_the_usage_page_shows_the_month(january: dict[str, Workload], owner_client: Client) -> None:
    """Amounts to the hundredth of a cent where they hold less than a cent, as the job pages
    show a run's cost (issue 32: a CPU run read 0.00 here and 0.0007 EUR on its page)."""
    response = owner_client.get("/p/alpha/usage/?month=2025-01")
    assert response.status_code == 200
    body = response.content.decode()
    assert "<title>Usage January 2025 · Alpha" in body
    total = cells(body, "usage-total")
    assert "GPU-hours 1.20" in total and f"Amount 3.96 {CUR}" in total
    # by user: owner 173.6 + 36 = 209.6 price-minutes = 3.4933; member 28 = 0.4667
    users = cells(body, "usage-by-user")
    assert "owner 91 1.03 3.4933" in users and "member 10 0.17 0.4667" in users
    workloads = cells(body, "usage-by-workload")
    assert "train-a job 31 1.03 2.8933" in workloads
    assert "prep job 60 0.00 0.60" in workloads
    assert "nb-b notebook 10 0.17 0.4667" in workloads
    assert f'href="/p/alpha/jobs/{january["train-a"].pk}/"' in body
    assert f'href="/p/alpha/notebooks/{january["nb-b"].pk}/"' in body
    flavors = cells(body, "usage-by-flavor")
    assert "test-gpu 41 1.20 3.36" in flavors and "test-cpu 60 0.00 0.60" in flavors
    assert "beta-run" not in body and "beta-user" not in body
    # the rule, stated; the month selector offers the months with lines and this one
    assert "each started minute is billed in full (one minute at least)" in body
    assert "price in effect for that minute, per unit" in body and "UTC" in body
    assert '<option value="2025-01" selected>January 2025</option>' in body
    assert '<option value="2025-02">February 2025</option>' in body
    assert 'href="?month=2025-02"' in body  # the next month with usage


def test_february_has_the_rest_of_the_notebook(
    january: dict[str, Workload], owner_client: Client
) -> None:
    body = owner_client.get("/p/alpha/usage/?month=2025-02").content.decode()
    assert "nb-b notebook 10 0.17 0.4667" in cells(body, "usage-by-workload")
    assert "train-a" not in body
    assert 'href="?month=2025-01"' in body


def test_this_month_shows_the_budget_forecast_and_alerts(
    project: Project, owner: Any, gpu: Flavor, owner_client: Client
) -> None:
    now = timezone.now()
    month = month_of(now)
    project.monthly_budget = Decimal("100.00")
    project.save()
    start = max(now - timedelta(minutes=5), month_start(month))
    ran(project, owner, "live", "job", gpu, 1, start, None)  # still running
    BudgetAlert.objects.create(
        project=project, month=month, threshold=50, budget=100, spent=Decimal("51.20"), currency=CUR
    )
    body = html.unescape(owner_client.get("/p/alpha/usage/").content.decode())
    assert f"of 100.00 {CUR}" in body and "Month-end forecast" in body
    assert f"(2.80 {CUR}/h," in body  # what runs now costs an hour
    assert "live" in cells(body, "usage-by-workload")
    assert f"50 % 100.00 {CUR} 51.20 {CUR}" in cells(body, "budget-alerts")


def test_a_bad_month_is_a_precise_400(owner_client: Client) -> None:
    response = owner_client.get("/p/alpha/usage/?month=2025-13")
    assert response.status_code == 400
    assert "month: '2025-13' is not a month: write it YYYY-MM" in response.content.decode()


def test_the_project_page_links_managers_to_usage(
    owner_client: Client, member: Any, project: Project
) -> None:
    body = owner_client.get("/p/alpha/").content.decode()
    assert 'href="/p/alpha/usage/"' in body and 'data-testid="month-spend"' in body
    member_body = logged_in(member).get("/p/alpha/").content.decode()
    assert 'href="/p/alpha/usage/"' not in member_body
    assert 'data-testid="month-spend"' in member_body


def test_a_plain_member_is_refused(january: dict[str, Workload], member: Any) -> None:
    client = logged_in(member)
    assert client.get("/p/alpha/usage/").status_code == 403
    assert client.post("/p/alpha/usage/budget/", {"monthly_budget": "5"}).status_code == 403
    api = api_client_for(member)
    assert api.get("/api/v1/usage/?project=alpha").status_code == 403
    assert api.get("/api/v1/usage/").status_code == 403  # manages nothing


def test_a_site_admin_opens_any_usage_page(january: dict[str, Workload], admin_user: Any) -> None:
    body = logged_in(admin_user).get("/p/beta/usage/?month=2025-01").content.decode()
    assert "beta-run" in body and "train-a" not in body


# --- the budget form --------------------------------------------------------------------


def test_the_budget_is_saved(project: Project, owner_client: Client) -> None:
    response = owner_client.post(
        "/p/alpha/usage/budget/", {"monthly_budget": "250.50", "budget_stops_running": "on"}
    )
    assert (response.status_code, response["Location"]) == (302, "/p/alpha/usage/")
    project.refresh_from_db()
    assert (project.monthly_budget, project.budget_stops_running) == (Decimal("250.50"), True)
    followed = owner_client.get("/p/alpha/usage/").content.decode()
    assert "Budget saved." in followed and 'value="250.50"' in followed


@pytest.mark.parametrize(
    ("amount", "error"),
    [
        ("lots", "'lots' is not an amount: write it like 500 or 500.00."),
        ("-5", "The budget is 0 (none) or more."),
        ("12.345", "Use at most 2 decimals (cents)."),
        ("99999999999", "The budget is at most 9999999999.99."),
        ("NaN", "The budget is 0 (none) or more."),
        ("", "This field is required."),
    ],
)
def test_a_bad_budget_is_a_precise_error_and_changes_nothing(
    project: Project, owner_client: Client, amount: str, error: str
) -> None:
    project.monthly_budget = Decimal("40.00")
    project.save()
    response = owner_client.post(
        "/p/alpha/usage/budget/", {"monthly_budget": amount, "budget_stops_running": "on"}
    )
    assert response.status_code == 400
    assert error in html.unescape(response.content.decode())
    project.refresh_from_db()
    assert (project.monthly_budget, project.budget_stops_running) == (Decimal("40.00"), False)


def test_the_budget_form_escapes_what_was_typed(owner_client: Client) -> None:
    body = owner_client.post("/p/alpha/usage/budget/", {"monthly_budget": "<b>x"}).content
    assert b"<b>x" not in body and b"&lt;b&gt;x" in body


# --- the API ------------------------------------------------------------------------------


def results(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.content
    return list(response.json()["results"])


def test_the_api_groups_by_month(january: dict[str, Workload], owner_api: APIClient) -> None:
    rows = results(owner_api.get("/api/v1/usage/?month=2025-01"))
    by_name = {row["workload_name"]: row for row in rows}
    assert sorted(by_name) == ["nb-b", "prep", "train-a"]  # alpha only: the projects managed
    train = by_name["train-a"]
    assert train == {
        "period": "2025-01",
        "project": "alpha",
        "user": "owner",
        "workload": str(january["train-a"].pk),
        "workload_name": "train-a",
        "kind": "job",
        "flavor": "test-gpu",
        "minutes": 31,
        "unit_minutes": 62,
        "gpu_hours": "1.03",
        "amount": "2.89",
        "currency": CUR,
        "estimated": False,
    }
    assert by_name["nb-b"]["amount"] == "0.47" and by_name["prep"]["gpu_hours"] == "0.00"


def test_the_api_groups_by_day_across_the_month_end(
    january: dict[str, Workload], owner_api: APIClient
) -> None:
    rows = results(
        owner_api.get("/api/v1/usage/?start=2025-01-31&end=2025-02-01&group=day&user=member")
    )
    assert [(r["period"], r["workload_name"], r["minutes"], r["amount"]) for r in rows] == [
        ("2025-01-31", "nb-b", 10, "0.47"),
        ("2025-02-01", "nb-b", 10, "0.47"),
    ]
    whole = results(owner_api.get("/api/v1/usage/?start=2025-01&end=2025-02&group=month"))
    assert [(r["period"], r["workload_name"]) for r in whole if r["user"] == "member"] == [
        ("2025-01", "nb-b"),
        ("2025-02", "nb-b"),
    ]


def test_the_api_filters(january: dict[str, Workload], owner_api: APIClient) -> None:
    def names(query: str) -> list[str]:
        return [r["workload_name"] for r in results(owner_api.get(f"/api/v1/usage/?{query}"))]

    assert names("month=2025-01&flavor=test-cpu") == ["prep"]
    assert names(f"month=2025-01&workload={january['train-a'].pk}") == ["train-a"]
    assert sorted(names("month=2025-01&user=owner")) == ["prep", "train-a"]
    assert sorted(names("month=2025-01&project=alpha")) == ["nb-b", "prep", "train-a"]
    assert names("start=2025-01-11&end=2025-01-20") == ["prep"]
    assert names("month=2025-03") == []


def test_admins_read_every_project(january: dict[str, Workload], admin_user: Any) -> None:
    api = api_client_for(admin_user)
    rows = results(api.get("/api/v1/usage/?month=2025-01"))
    assert {r["project"] for r in rows} == {"alpha", "beta"}
    beta = results(api.get("/api/v1/usage/?month=2025-01&project=beta"))
    # 5 h × 4 units × 2.80 = 56.00; 20 GPU-hours
    assert [(r["workload_name"], r["gpu_hours"], r["amount"]) for r in beta] == [
        ("beta-run", "20.00", "56.00")
    ]


def test_another_projects_usage_is_404_for_a_manager(
    january: dict[str, Workload], outsider_api: APIClient
) -> None:
    assert outsider_api.get("/api/v1/usage/?project=alpha").status_code == 404
    rows = results(outsider_api.get("/api/v1/usage/?month=2025-01"))
    assert {r["project"] for r in rows} == {"beta"}  # the project the outsider manages


@pytest.mark.parametrize(
    ("query", "param", "message"),
    [
        ("group=week", "group", "'week' is not a grouping: use day or month."),
        ("month=2025-13", "month", "'2025-13' is not a month"),
        ("month=2025-01&start=2025-01-02", "month", "either month or start/end"),
        ("start=2025-02-30", "start", "'2025-02-30' is not a day"),
        ("start=2025-01-10&end=2025-01-09", "end", "is before the start"),
        ("end=yesterday", "end", "'yesterday' is not a day"),
        ("start=0001-01-01", "start", "out of range"),
        ("start=2000-01-01&end=2025-01-01", "end", "at most 3660 days"),
        ("user=nobody", "user", "No user 'nobody'."),
        ("workload=42", "workload", "'42' is not a workload id."),
        ("flavor=tpu", "flavor", "No flavor 'tpu'."),
        ("limit=0", "limit", "Give a whole number from 1 to 1000"),
        ("user=a%00b", "user", "A filter cannot hold a NUL character."),
        ("flavor=%00", "flavor", "A filter cannot hold a NUL character."),
        ("project=%00", "project", "A filter cannot hold a NUL character."),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(
    owner_api: APIClient, query: str, param: str, message: str
) -> None:
    response = owner_api.get(f"/api/v1/usage/?{query}")
    assert response.status_code == 400
    assert message in response.json()[param][0]


def test_anonymous_gets_401() -> None:
    assert APIClient().get("/api/v1/usage/").status_code == 401


# --- the navigation and the banner ------------------------------------------------------


def test_managers_have_usage_in_the_navigation(owner_client: Client, member: Any) -> None:
    nav = 'data-testid="nav-usage"'
    assert nav in owner_client.get("/p/alpha/jobs/").content.decode()
    assert nav in owner_client.get("/settings/").content.decode()  # the project last opened
    plain = logged_in(member)
    assert nav not in plain.get("/p/alpha/jobs/").content.decode()


def test_an_alert_of_this_month_is_a_banner_on_the_projects_pages(
    project: Project, owner_client: Client, member: Any, other_project: Project
) -> None:
    month = month_of(timezone.now())
    project.monthly_budget = Decimal("10.00")
    project.save()
    assert 'data-testid="budget-banner"' not in owner_client.get("/p/alpha/jobs/").content.decode()
    for threshold in (50, 80, 100):
        BudgetAlert.objects.create(
            project=project, month=month, threshold=threshold, budget=10, spent=10, currency=CUR
        )
    seen = html.unescape(logged_in(member).get("/p/alpha/jobs/").content.decode())
    banner = seen[
        seen.index('data-testid="budget-banner"') : seen.index(
            "</div>", seen.index('data-testid="budget-banner"')
        )
    ]
    assert f"Budget of 10.00 {CUR} for {month:%B %Y} reached" in banner
    assert "new launches wait" in banner and "/usage/" not in banner  # no link for a member
    owner_seen = owner_client.get("/p/alpha/jobs/").content.decode()
    assert 'href="/p/alpha/usage/">Usage and budget</a>' in owner_seen
    # last month's alert is no banner, nor another project's
    BudgetAlert.objects.all().update(month=date(2000, 1, 1))
    BudgetAlert.objects.create(
        project=other_project, month=month, threshold=100, budget=1, spent=1, currency=CUR
    )
    assert 'data-testid="budget-banner"' not in owner_client.get("/p/alpha/jobs/").content.decode()
