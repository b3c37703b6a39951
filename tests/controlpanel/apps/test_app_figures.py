"""An app's request figures (issue #16): requests sent through the panel's proxy, at the app's
own host under USER_CONTENT_DOMAIN (`app-<id>.localhost:8000` under the local backend), to a
real HTTP server on loopback (standing in for the app's server) show on the app's page and its
htmx status fragment: the counts exactly, p50/p95 within the bounds of the latency bucket that holds
the true value, 5xx answers (the server's, and the proxy's 502 when the server is gone) as
errors; refused requests (no token, a wrong one, another project's member) are not counted,
and nothing in Redis holds the token or the body."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from controlpanel.core.metrics.store import client as redis_client
from controlpanel.projects.models import Project
from controlpanel.served import stats as app_stats
from tests.controlpanel.apps.test_app_access import (
    bearer,
    content_domain,  # noqa: F401 (autouse)
    host,
    make_app,
)

FAST_S = 0.12  # in the (0.1, 0.25] bucket, with the proxy's overhead
SLOW_S = 0.6  # in the (0.5, 1] bucket


def bounds(fastest: float, slowest: float) -> tuple[float, float]:
    """From the lower bound of `fastest`'s bucket to the upper bound of `slowest`'s: where a
    percentile read from the histogram must lie when the true one is between the two."""
    low, high = app_stats.bucket_of(fastest), app_stats.bucket_of(slowest)
    return (app_stats.LATENCY[low - 1] if low else 0.0), app_stats.LATENCY[high]


class StandIn(BaseHTTPRequestHandler):
    """/v1/ok?sleep=S answers 200 after S seconds; /v1/fail answers 500."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        match = re.search(r"sleep=([0-9.]+)", self.path)
        time.sleep(float(match.group(1)) if match else 0)
        status = 500 if self.path.startswith("/v1/fail") else 200
        body = b'{"ok": true}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def call(client: Client, url: str, authorization: str | None) -> int:
    headers = {"Authorization": authorization} if authorization else {}
    answer: Any = client.post(
        url, data=b'{"secret": "prompt"}', content_type="application/json", headers=headers
    )
    if answer.streaming:
        b"".join(answer.streaming_content)  # the relay ends: the request is counted
    return int(answer.status_code)


def test_quantiles_lie_in_the_bucket_of_the_true_value() -> None:
    assert app_stats.quantile(0.5, [0] * (len(app_stats.LATENCY) + 1)) is None
    counts = [0] * (len(app_stats.LATENCY) + 1)
    for seconds in [0.12] * 18 + [0.6] * 2:
        counts[app_stats.bucket_of(seconds)] += 1
    p50, p95 = app_stats.quantile(0.5, counts), app_stats.quantile(0.95, counts)
    assert p50 is not None and 0.1 < p50 <= 0.25
    assert p95 is not None and 0.5 < p95 <= 1.0
    counts = [0] * (len(app_stats.LATENCY) + 1)
    counts[-1] = 3  # slower than the last bound
    assert app_stats.quantile(0.95, counts) == app_stats.LATENCY[-1]
    assert app_stats.duration_text(0.1234) == "123 ms" and app_stats.duration_text(2.5) == "2.50 s"


@pytest.mark.django_db
def test_the_app_page_shows_what_went_through_the_proxy(
    project: Project, owner: Any, outsider: Any, owner_client: Client, stand_in: str
) -> None:
    app = make_app(project, owner)
    app.url = stand_in
    app.save(update_fields=["url"])
    base = "/v1"
    token = bearer(owner)
    proxy = Client(HTTP_HOST=host(app))  # the app's own host, as its callers reach it

    # Refused: never reach the server, never counted.
    assert call(proxy, f"{base}/ok", None) == 401
    assert call(proxy, f"{base}/ok", "Bearer ajt_wrong") == 401
    assert call(proxy, f"{base}/ok", bearer(outsider)) == 403  # "No such app."
    assert app_stats.figures(app_id=app.pk) == app_stats.Figures(0, 0, 0, 0.0, 0.0, None, None)

    began = time.time()
    seen: list[float] = []  # each call's time at the client: the proxy's is a little less
    for sleep, count in ((FAST_S, 18), (SLOW_S, 2)):
        for _ in range(count):
            start = time.perf_counter()
            assert call(proxy, f"{base}/ok?sleep={sleep}", token) == 200
            seen.append(time.perf_counter() - start)
    # The 12th of 23 (p50) and the 22nd (p95) are a fast and a slow call.
    p50_low, p50_high = bounds(FAST_S, max(seen[:18]))
    p95_low, p95_high = bounds(SLOW_S, max(seen[18:]))
    assert (p50_low, p95_low) == (0.1, 0.5)  # their buckets differ: the check below means it
    assert [call(proxy, f"{base}/fail", token) for _ in range(3)] == [500] * 3

    figures = app_stats.figures(app_id=app.pk)
    assert figures is not None
    assert (figures.requests_1m, figures.requests_5m, figures.errors_5m) == (23, 23, 3)
    # 18 at 0.12 s, 2 at 0.6 s, 3 fast failures: the 12th is at 0.12 s, the 22nd at 0.6 s.
    assert figures.p50_s is not None and p50_low < figures.p50_s <= p50_high
    assert figures.p95_s is not None and p95_low < figures.p95_s <= p95_high
    # The rates divide by the seconds the read slots cover (50–60 s, 290–300 s).
    assert 23 / 60 <= figures.rps_1m <= 23 / 50 and 23 / 300 <= figures.rps_5m <= 23 / 290

    page = owner_client.get(f"/p/alpha/apps/{app.pk}/").content.decode()
    fragment = owner_client.get(
        f"/p/alpha/apps/{app.pk}/status/", HTTP_HX_REQUEST="true"
    ).content.decode()
    for html in (page, fragment):
        assert "(23 requests)" in html and "last 5 min (23)" in html
        assert re.search(r'data-testid="app-errors">3 <small', html)
        assert f"p50 {figures.p50_text} · p95 {figures.p95_text}" in html
    assert 'hx-trigger="every 10s' in page

    # The server gone: the proxy's 502 is an error too.
    app.url = "http://127.0.0.1:9"
    app.save(update_fields=["url"])
    assert call(proxy, f"{base}/ok", token) == 502
    after = app_stats.figures(app_id=app.pk)
    assert after is not None and (after.requests_5m, after.errors_5m) == (24, 4)

    # What Redis holds: counts under the app's id, with an expiry; no token, no body.
    redis = redis_client(settings.REDIS_URL)
    keys = list(redis.scan_iter(f"{settings.REDIS_KEY_PREFIX}:app-requests:{app.pk}:*"))
    assert keys
    for name in keys:
        held: dict[bytes, bytes] = redis.hgetall(name)  # type: ignore[assignment]
        assert set(held) <= {b"n", b"err"} | {
            f"b{i}".encode() for i in range(len(app_stats.LATENCY) + 1)
        }
        assert 0 < redis.ttl(name) <= app_stats.KEEP_S + app_stats.SLOT_S
        assert token.split()[1].encode() not in name and b"secret" not in b"".join(held.values())
    assert time.time() - began < app_stats.SHORT_S  # else the 1-min count above was luck


@pytest.mark.django_db
def test_figures_age_out_of_the_windows(project: Project, owner: Any) -> None:
    app = make_app(project, owner)
    now = time.time() // app_stats.SLOT_S * app_stats.SLOT_S + 5  # 5 s into a slot
    app_stats.record(app_id=app.pk, status=200, seconds=0.02, now=now - 120)  # 2 min ago
    app_stats.record(app_id=app.pk, status=503, seconds=0.3, now=now - 20)
    app_stats.record(app_id=app.pk, status=200, seconds=0.02, now=now - 400)  # too old
    figures = app_stats.figures(app_id=app.pk, now=now)
    assert figures is not None
    assert (figures.requests_1m, figures.requests_5m, figures.errors_5m) == (1, 2, 1)
    assert figures.rps_1m == pytest.approx(1 / 55) and figures.rps_5m == pytest.approx(2 / 295)
