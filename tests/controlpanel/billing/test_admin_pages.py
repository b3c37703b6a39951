"""The site admins' billing pages against runs recorded by the real ledger (run_record):
amounts to the cent on the month's table, the drill-down, the run's lines and the invoice
(tax included); every table's CSV equals the page; closing, reopening and locking a month
from the pages, and a late correction of a locked month shown as an adjustment line of the
next open month; new prices re-price what they cover and refuse what they must not touch;
site admins only; bad input answered 400 with what is wrong, nothing changed."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

import pytest
from django.db.models.signals import post_save
from django.test import Client

from controlpanel.billing import admin_views, receivers
from controlpanel.billing.models import Line, Period, PeriodState
from controlpanel.billing.selectors import invoice_lines
from controlpanel.billing.services import period_close, period_lock, run_record
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.controlpanel.test_settings import _check
from tests.fixtures.panel import UserFactory, logged_in

DEC, JAN, FEB = date(2024, 12, 1), date(2025, 1, 1), date(2025, 2, 1)


def at(day: int, hour: int = 0, minute: int = 0, second: int = 0, month: int = 1) -> datetime:
    return datetime(2025 if month < 12 else 2024, month, day, hour, minute, second, tzinfo=UTC)


class Tables(HTMLParser):
    """The text of every cell of every table with a data-testid, by that id (tbody rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.current: str | None = None
        self.section = ""
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table" and (found.get("data-testid") or "").startswith("table-"):
            self.current = str(found["data-testid"])[len("table-") :]
            self.tables[self.current] = []
        elif tag in ("thead", "tbody", "tfoot"):
            self.section = tag
        elif tag == "tr" and self.current and self.section == "tbody":
            self.row = [] if "empty-row" not in (found.get("class") or "") else None
        elif tag == "td" and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.row is not None and self.cell is not None:
            self.row.append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr" and self.row is not None and self.current:
            self.tables[self.current].append(self.row)
            self.row = None
        elif tag == "table":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def page_tables(client: Client, url: str) -> dict[str, list[list[str]]]:
    response = client.get(url)
    assert response.status_code == 200, (url, response.content[:500])
    parser = Tables()
    parser.feed(response.content.decode())
    return parser.tables


def csv_rows(client: Client, url: str) -> list[list[str]]:
    response = client.get(url)
    assert response.status_code == 200, url
    assert response.streaming and response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    rows = list(csv.reader(io.StringIO(body)))
    return rows[1:]  # the header


@pytest.fixture
def unhooked() -> Any:
    """Runs set in January 2025 are recorded by the test itself, at their own times."""
    post_save.disconnect(dispatch_uid="billing-run-saved", sender=JobRun)
    yield
    post_save.connect(receivers._run_saved, sender=JobRun, dispatch_uid="billing-run-saved")


@pytest.fixture
def gpu(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="test-gpu", gpus_per_unit=1, vcpu_per_unit=8, memory_gib_per_unit=64
    )
    FlavorPrice.objects.create(flavor=flavor, valid_from=at(1, month=12), price_per_hour=6)
    return flavor


@pytest.fixture
def cpu(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="test-cpu", gpus_per_unit=0, vcpu_per_unit=2, memory_gib_per_unit=4
    )
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=at(1, month=12), price_per_hour=Decimal("0.0400")
    )
    return flavor


def run_of(
    project: Project,
    owner: Any,
    name: str,
    flavor: Flavor,
    units: int,
    start: datetime,
    end: datetime,
) -> JobRun:
    job = Job.objects.create(
        project=project, owner=owner, name=name, image="x/y:1", flavor=flavor, gpu=units
    )
    run = JobRun.objects.create(
        uid=f"pod-{name}",
        job=job,
        project=project,
        run=1,
        flavor=flavor,
        units=units,
        started_at=start,
        finished_at=end,
    )
    assert run_record(run_id=run.pk, now=end + timedelta(minutes=5))
    return run


@pytest.fixture
def story(
    unhooked: Any, project: Project, other_project: Project, gpu: Flavor, cpu: Flavor
) -> dict[str, Any]:
    """Alpha: December 10 GPU-minutes (1.00); in January alice's 2-unit run of 30 min 20 s
    (31 minutes: 62 × 6 / 60 = 6.20), bob's 5 seconds (one minute: 0.10) and alice's CPU
    run, 3 units for 100 minutes (300 × 0.04 / 60 = 0.20; 100 × 3 × 2 vCPU = 10 CPU-hours).
    Beta: one GPU-hour in January (6.00)."""
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    runs = {
        "dec": run_of(project, alice, "dec", gpu, 1, at(5, 9, month=12), at(5, 9, 10, month=12)),
        "train": run_of(project, alice, "train", gpu, 2, at(10, 10), at(10, 10, 30, 20)),
        "blip": run_of(project, bob, "blip", gpu, 1, at(11), at(11, 0, 0, 5)),
        "prep": run_of(project, alice, "prep", cpu, 3, at(12), at(12, 1, 40)),
        "beta": run_of(other_project, bob, "beta-run", gpu, 1, at(13), at(13, 1)),
    }
    return runs


@pytest.fixture
def admin_client(admin_user: Any) -> Client:
    return logged_in(admin_user)


ALPHA_JAN = ["alpha", "Alpha", "1.05", "10.00", "6.50", "1.00", "5.50", "550.0", "0"]


def test_the_month_table_is_exact_to_the_cent(story: Any, admin_client: Client) -> None:
    tables = page_tables(admin_client, "/billing/?month=2025-01")
    assert tables["projects"] == [
        ALPHA_JAN,
        ["beta", "Beta", "1.00", "0.00", "6.00", "0.00", "6.00", "", "0"],
    ]
    page = admin_client.get("/billing/?month=2025-01").content.decode()
    assert 'data-testid="month-amount">12.50<' in page
    assert "each started minute in full, one minute at least" in page  # the rule, stated
    assert "Months are calendar months in UTC" in page
    assert 'data-testid="tax-rate">0 %<' in page
    assert ">open</span>" in page and "/billing/2025-01/close/" in page
    # December: alpha's 1.00, against nothing before it
    december = page_tables(admin_client, "/billing/?month=2024-12")["projects"]
    assert december == [["alpha", "Alpha", "0.17", "0.00", "1.00", "0.00", "1.00", "", "0"]]


def test_the_drill_down_users_workloads_runs_lines(story: Any, admin_client: Client) -> None:
    base = "/billing/2025-01/p/alpha/"
    tables = page_tables(admin_client, base)
    assert tables["users"] == [
        ["alice", "2", "2", "1.03", "10.00", "6.40"],
        ["bob", "1", "1", "0.02", "0.00", "0.10"],
    ]
    assert tables["workloads"] == [
        ["train", "job", "alice", "1", "1.03", "0.00", "6.20"],
        ["prep", "job", "alice", "1", "0.00", "10.00", "0.20"],
        ["blip", "job", "bob", "1", "0.02", "0.00", "0.10"],
    ]
    train = story["train"]
    # a run reads as its workload's name, run number and short id (the uid in its title)
    assert tables["runs"][0] == [
        "train #1 · pod-trai",
        "alice",
        "2025-01-10 10:00:00",
        "2025-01-10 10:30:20",
        "test-gpu × 2",
        "31",
        "6.20",
        "0",
    ]
    assert (
        'title="run pod-train">train #1 · pod-trai</a>' in admin_client.get(base).content.decode()
    )
    bob = page_tables(admin_client, f"{base}?user=bob")
    assert [row[0] for row in bob["workloads"]] == ["blip"]
    assert [row[0] for row in bob["runs"]] == ["blip #1 · pod-blip"]
    by_workload = page_tables(admin_client, f"{base}?workload={train.job_id}")
    assert [row[0] for row in by_workload["runs"]] == ["train #1 · pod-trai"]

    lines = page_tables(admin_client, f"{base}runs/{train.pk}/")["lines"]
    price = FlavorPrice.objects.get(flavor__name="test-gpu")
    assert lines == [
        [
            "usage",
            "2025-01-10 10:00:00 → 2025-01-10 10:31:00",
            "0",
            "31",
            "2",
            f"#{price.pk} from 2024-12-01 00:00:00",
            "6.0000",
            "6.20",
        ]
    ]
    # another project's run, or a month it has no line in: 404
    assert admin_client.get(f"{base}runs/{story['beta'].pk}/").status_code == 404
    assert admin_client.get(f"/billing/2025-02/p/alpha/runs/{train.pk}/").status_code == 404


def test_the_invoice_with_tax_and_its_print_stylesheet(
    story: Any, admin_client: Client, settings: Any
) -> None:
    settings.BILLING_TAX_RATE = Decimal("20")
    url = "/billing/2025-01/p/alpha/invoice/"
    response = admin_client.get(url)
    page = response.content.decode()
    assert page_tables(admin_client, url)["invoice"] == [
        ["test-cpu", "3", "0.0400", "100", "5.00", "", "0.20"],
        ["test-gpu", "1", "6.0000", "1", "0.02", "", "0.10"],
        ["test-gpu", "2", "6.0000", "31", "1.03", "", "6.20"],
    ]
    assert 'data-testid="invoice-subtotal">6.50 EUR<' in page
    assert 'data-testid="invoice-tax">1.30 EUR<' in page
    assert "<strong>7.80 EUR</strong>" in page
    assert 'data-testid="invoice-draft"' in page  # January is still open
    assert "/static/css/invoice.css" in page
    css = (admin_views.settings.BASE_DIR / "static" / "css" / "invoice.css").read_text()
    assert "@media print" in css and ".topbar" in css
    # the month's table says what the invoice says
    project = Project.objects.get(slug="alpha")
    amounts = [Decimal(str(line["amount"])) for line in invoice_lines(month=JAN, project=project)]
    assert sum(amounts, Decimal(0)) == Decimal("6.50")


CSV_PAGES = [
    ("/billing/?month=2025-01", "projects", "/billing/projects.csv?month=2025-01"),
    ("/billing/2025-01/p/alpha/", "users", "/billing/2025-01/p/alpha/users.csv"),
    ("/billing/2025-01/p/alpha/", "workloads", "/billing/2025-01/p/alpha/workloads.csv"),
    ("/billing/2025-01/p/alpha/", "runs", "/billing/2025-01/p/alpha/runs.csv"),
    (
        "/billing/2025-01/p/alpha/?user=alice",
        "runs",
        "/billing/2025-01/p/alpha/runs.csv?user=alice",
    ),
    ("/billing/2025-01/p/alpha/invoice/", "invoice", "/billing/2025-01/p/alpha/invoice.csv"),
    ("/billing/prices/", "prices", "/billing/prices.csv"),
]


@pytest.mark.parametrize(("page", "table", "csv_url"), CSV_PAGES)
def test_every_csv_equals_its_page(
    story: Any, admin_client: Client, page: str, table: str, csv_url: str
) -> None:
    rows = page_tables(admin_client, page)[table]
    assert rows  # something to compare
    assert csv_rows(admin_client, csv_url) == rows


def test_the_run_lines_csv_equals_its_page(story: Any, admin_client: Client) -> None:
    url = f"/billing/2025-01/p/alpha/runs/{story['prep'].pk}/"
    assert csv_rows(admin_client, f"{url}lines.csv") == page_tables(admin_client, url)["lines"]


def test_long_lists_are_paged_and_the_csv_holds_every_page(
    story: Any, admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_views, "PAGE_SIZE", 2)
    base = "/billing/2025-01/p/alpha/"
    first, second = page_tables(admin_client, base), page_tables(admin_client, f"{base}?rpage=2")
    assert len(first["runs"]) == 2 and len(second["runs"]) == 1
    assert first["runs"] + second["runs"] == csv_rows(admin_client, f"{base}runs.csv")
    assert admin_client.get(f"{base}?rpage=2&wpage=2").status_code == 200
    assert "Next" in admin_client.get(base).content.decode()


def _period_state(month: date) -> str:
    period = Period.objects.filter(month=month).first()
    return period.state if period else PeriodState.OPEN


def test_close_reopen_lock_then_a_late_correction_is_an_adjustment(
    story: Any, admin_client: Client, admin_user: Any
) -> None:
    lines_before = list(Line.objects.filter(period=JAN).values_list("pk", "minutes"))
    # confirmation first, then the POST (CSRF enforced: a client that checks it)
    confirm = admin_client.get("/billing/2025-01/close/")
    assert confirm.status_code == 200 and "bills 12.50 EUR" in confirm.content.decode()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    assert strict.post("/billing/2025-01/close/").status_code == 403
    assert _period_state(JAN) == PeriodState.OPEN

    response = admin_client.post("/billing/2025-01/close/")
    assert response.status_code == 302 and response["Location"] == "/billing/?month=2025-01"
    assert _period_state(JAN) == PeriodState.CLOSED
    again = admin_client.post("/billing/2025-01/close/")
    assert again.status_code == 400
    assert "2025-01 is closed already." in again.content.decode()
    assert admin_client.post("/billing/2025-01/reopen/").status_code == 302
    assert _period_state(JAN) == PeriodState.OPEN
    assert admin_client.post("/billing/2025-01/close/").status_code == 302
    assert admin_client.post("/billing/2025-01/lock/").status_code == 302
    assert _period_state(JAN) == PeriodState.LOCKED
    refused = admin_client.post("/billing/2025-01/reopen/")
    assert refused.status_code == 400
    assert "2025-01 is locked: only a closed month reopens." in refused.content.decode()
    assert list(Line.objects.filter(period=JAN).values_list("pk", "minutes")) == lines_before

    # We learn that the training run ended 10 minutes earlier: 21 minutes, not 31.
    train = story["train"]
    train.finished_at = at(10, 10, 20, 20)
    train.save()
    run_record(run_id=train.pk, now=at(2, month=2))
    january = page_tables(admin_client, "/billing/?month=2025-01")["projects"]
    assert january[0] == ALPHA_JAN  # locked: never changes
    february = page_tables(admin_client, "/billing/?month=2025-02")["projects"]
    # -10 min × 2 units × 6/h = -2.00, billed in February, against 6.50 in January
    assert february == [
        ["beta", "Beta", "0.00", "0.00", "0.00", "6.00", "-6.00", "-100.0", "0"],
        ["alpha", "Alpha", "-0.33", "0.00", "-2.00", "6.50", "-8.50", "-130.8", "1"],
    ]
    runs = page_tables(admin_client, "/billing/2025-02/p/alpha/")["runs"]
    assert runs == [
        [
            "train #1 · pod-trai",
            "alice",
            "2025-01-10 10:00:00",
            "2025-01-10 10:20:20",
            "test-gpu × 2",
            "-10",
            "-2.00",
            "1",
        ]
    ]
    lines = page_tables(admin_client, f"/billing/2025-02/p/alpha/runs/{train.pk}/")["lines"]
    assert lines[0][0] == "adjustment of 2025-01 (locked)"
    assert lines[0][3:] == ["-10", "2", lines[0][5], "6.0000", "-2.00"]
    invoice = page_tables(admin_client, "/billing/2025-02/p/alpha/invoice/")["invoice"]
    assert invoice == [["test-gpu", "2", "6.0000", "-10", "-0.33", "adjusts 2025-01", "-2.00"]]


def test_period_moves_refused_with_the_services_reason(story: Any, admin_client: Client) -> None:
    future = admin_client.post("/billing/2999-12/close/")
    assert future.status_code == 400 and "2999-12 is not over yet." in future.content.decode()
    lock = admin_client.post("/billing/2025-01/lock/")
    assert lock.status_code == 400
    assert "2025-01 is open: close it (and review) first." in lock.content.decode()
    reopen = admin_client.post("/billing/2025-01/reopen/")
    assert reopen.status_code == 400 and "only a closed month reopens" in reopen.content.decode()
    assert _period_state(JAN) == PeriodState.OPEN
    assert admin_client.get("/billing/2025-01/destroy/").status_code == 404


def test_a_new_price_reprices_the_minutes_it_covers(story: Any, admin_client: Client) -> None:
    response = admin_client.post(
        "/billing/prices/",
        {"flavor": "test-gpu", "valid_from": "2025-01-10 10:15", "price_per_hour": "12"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    # train: minutes 0..14 at 6 (15 × 2 × 6 / 60 = 3.00), 15..30 at 12 (16 × 2 × 12 / 60 = 6.40)
    train = story["train"]
    lines = page_tables(admin_client, f"/billing/2025-01/p/alpha/runs/{train.pk}/")["lines"]
    assert [(row[1], row[3], row[6], row[7]) for row in lines] == [
        ("2025-01-10 10:00:00 → 2025-01-10 10:15:00", "15", "6.0000", "3.00"),
        ("2025-01-10 10:15:00 → 2025-01-10 10:31:00", "16", "12.0000", "6.40"),
    ]
    # bob's minute (Jan 11) and beta's hour (Jan 13) are at 12 now; December is untouched
    table = page_tables(admin_client, "/billing/?month=2025-01")["projects"]
    assert [(row[0], row[4]) for row in table] == [("beta", "12.00"), ("alpha", "9.80")]
    prices = page_tables(admin_client, "/billing/prices/")["prices"]
    assert ["test-gpu", "2025-01-10 10:15:00", "12.0000", "in effect"] in prices
    assert ["test-gpu", "2024-12-01 00:00:00", "6.0000", ""] in prices


def _snapshot() -> tuple[Any, ...]:
    return (
        list(FlavorPrice.objects.order_by("pk").values_list("pk", "price_per_hour")),
        list(Line.objects.order_by("pk").values_list("pk", "minutes", "price_id")),
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"flavor": "nope", "valid_from": "2025-03-01", "price_per_hour": "1"}, "No such flavor."),
        (
            {"flavor": "test-gpu", "valid_from": "01/03/2025", "price_per_hour": "1"},
            "&#x27;01/03/2025&#x27; is not a date: write YYYY-MM-DD or YYYY-MM-DD HH:MM (UTC)",
        ),
        (
            {"flavor": "test-gpu", "valid_from": "1999-03-01", "price_per_hour": "1"},
            "The year must be 2000 to 2999.",
        ),
        (
            {"flavor": "test-gpu", "valid_from": "2025-03-01", "price_per_hour": "-1"},
            "Ensure this value is greater than or equal to 0.",
        ),
        (
            {"flavor": "test-gpu", "valid_from": "2025-03-01", "price_per_hour": "1.00001"},
            "Ensure that there are no more than 4 decimal places.",
        ),
        (
            {"flavor": "test-gpu", "valid_from": "2024-12-01", "price_per_hour": "7"},
            "test-gpu already has a price from 2024-12-01 00:00 UTC (6.0000/h).",
        ),
        ({"flavor": "test-gpu", "price_per_hour": "7"}, "Say from when the price applies"),
    ],
)
def test_a_bad_price_is_refused_precisely_and_changes_nothing(
    story: Any, admin_client: Client, data: dict[str, str], error: str
) -> None:
    before = _snapshot()
    response = admin_client.post("/billing/prices/", data)
    assert response.status_code == 400
    assert error in response.content.decode()
    assert _snapshot() == before


def test_a_price_into_a_closed_or_locked_month_is_refused(story: Any, admin_client: Client) -> None:
    period_close(month=JAN, now=at(1, 1, month=2))
    before = _snapshot()
    data = {"flavor": "test-gpu", "valid_from": "2025-01-20", "price_per_hour": "9"}
    closed = admin_client.post("/billing/prices/", data)
    assert closed.status_code == 400
    assert "2025-01 is closed: a price from 2025-01-20 00:00 UTC would change its invoice." in (
        closed.content.decode()
    )
    period_lock(month=JAN, now=at(1, 2, month=2))
    locked = admin_client.post("/billing/prices/", data)
    assert locked.status_code == 400
    assert "2025-01 is locked: a price from 2025-01-20 00:00 UTC would change it." in (
        locked.content.decode()
    )
    assert _snapshot() == before
    later = admin_client.post("/billing/prices/", data | {"valid_from": "2025-02-01"})
    assert later.status_code == 302


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/billing/?month=2025-13", "month: '2025-13': the month must be 01 to 12."),
        ("/billing/?month=january", "month: 'january' is not a month: write it as YYYY-MM"),
        ("/billing/?month=1999-12", "month: '1999-12': the year must be 2000 to 2999."),
        ("/billing/projects.csv?month=2025-1", "month: '2025-1' is not a month"),
        ("/billing/2025-00/p/alpha/", "month: '2025-00': the month must be 01 to 12."),
        ("/billing/2025-01/p/alpha/?workload=abc", "workload: 'abc' is not a workload id"),
        ("/billing/2025-01/p/alpha/?rpage=x", "rpage: 'x' is not a page number."),
        ("/billing/2025-13/close/", "month: '2025-13': the month must be 01 to 12."),
    ],
)
def test_bad_query_values_get_a_precise_400(
    story: Any, admin_client: Client, url: str, message: str
) -> None:
    response = admin_client.get(url)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_a_project_or_month_that_does_not_exist(story: Any, admin_client: Client) -> None:
    assert admin_client.get("/billing/2025-01/p/nope/").status_code == 404
    empty = page_tables(admin_client, "/billing/2025-06/p/alpha/")
    assert empty["runs"] == [] and empty["users"] == []


ROUTES = [
    ("get", "/billing/"),
    ("get", "/billing/projects.csv"),
    ("get", "/billing/prices/"),
    ("post", "/billing/prices/"),
    ("get", "/billing/prices.csv"),
    ("get", "/billing/2025-01/close/"),
    ("post", "/billing/2025-01/close/"),
    ("post", "/billing/2025-01/lock/"),
    ("post", "/billing/2025-01/reopen/"),
    ("get", "/billing/2025-01/p/alpha/"),
    ("get", "/billing/2025-01/p/alpha/users.csv"),
    ("get", "/billing/2025-01/p/alpha/runs.csv"),
    ("get", "/billing/2025-01/p/alpha/workloads.csv"),
    ("get", "/billing/2025-01/p/alpha/runs/{run}/"),
    ("get", "/billing/2025-01/p/alpha/runs/{run}/lines.csv"),
    ("get", "/billing/2025-01/p/alpha/invoice/"),
    ("get", "/billing/2025-01/p/alpha/invoice.csv"),
]


@pytest.mark.parametrize(("method", "url"), ROUTES)
def test_only_site_admins_see_billing(
    story: Any, owner: Any, member: Any, outsider: Any, method: str, url: str
) -> None:
    """The project's manager and member, another project's manager: 404, nothing changed;
    signed out: to the log-in page."""
    url = url.format(run=story["train"].pk)
    data = {"flavor": "test-gpu", "valid_from": "2025-01-10", "price_per_hour": "99"}
    before = _snapshot(), _period_state(JAN)
    for user in (owner, member, outsider):
        response = getattr(logged_in(user), method)(url, data)
        assert response.status_code == 404, (user.username, url)
    anonymous = getattr(Client(), method)(url, data)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert (_snapshot(), _period_state(JAN)) == before


def test_the_nav_links_billing_for_site_admins_only(
    story: Any, admin_client: Client, owner: Any
) -> None:
    page = admin_client.get("/billing/").content.decode()
    assert '<a href="/billing/" aria-current="page">Billing</a>' in page
    home = logged_in(owner).get("/p/alpha/").content.decode()
    assert ">Billing<" not in home


def test_user_text_is_escaped(story: Any, admin_client: Client) -> None:
    Job.objects.filter(name="train").update(name="<b>=cmd()</b>")
    page = admin_client.get("/billing/2025-01/p/alpha/").content.decode()
    assert "<b>=cmd()</b>" not in page and "&lt;b&gt;=cmd()&lt;/b&gt;" in page
    workloads = csv_rows(admin_client, "/billing/2025-01/p/alpha/workloads.csv")
    assert workloads[0][0] == "<b>=cmd()</b>"
    Job.objects.filter(name="<b>=cmd()</b>").update(name="=cmd()")
    workloads = csv_rows(admin_client, "/billing/2025-01/p/alpha/workloads.csv")
    assert workloads[0][0] == "'=cmd()"  # a spreadsheet shows it, never runs it


@pytest.mark.parametrize("value", ["abc", "-1", "101", "0.123456"])
def test_a_bad_tax_rate_stops_startup_naming_it(value: str) -> None:
    result = _check({"DEBUG": "1", "BILLING_TAX_RATE": value})
    assert result.returncode != 0
    assert "BILLING_TAX_RATE" in result.stderr
