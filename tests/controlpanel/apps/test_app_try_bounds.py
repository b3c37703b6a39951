""" "Try it" cannot pin the panel (issue 25): a try ends TRY_IT_DEADLINE_SECONDS after the click
even against a server that trickles bytes (through the view, and through try_open/try_text
alone), and a person holds at most TRY_IT_PER_USER tries at once (through the view, and in
Redis's count alone, where a slot of a process that died lapses on its own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import Client

from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.try_guard import Guard, TryRefused, slot_release, slot_take
from controlpanel.served.try_it import OUT_OF_TIME, TryRequest, try_open, try_text
from tests.controlpanel.apps.test_app_access import make_app

EVENT = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'


class Trickle:
    """An app's server that answers 200 at once, then sends one piece every 0.1 s for 20 s:
    whole events (`events`) or single bytes of one line that never ends (`bytes`). `hung_up`
    is set when the panel closed the connection before the 20 s were over."""

    def __init__(self, mode: str) -> None:
        self.hung_up = threading.Event()
        trickle = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self.wfile.write(b"data: " if mode == "bytes" else b"")
                    for _ in range(200):
                        self.wfile.write(b"x" if mode == "bytes" else EVENT)
                        self.wfile.flush()
                        time.sleep(0.1)
                except OSError:
                    trickle.hung_up.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=["events", "bytes"])
def trickle(request: pytest.FixtureRequest) -> Iterator[Trickle]:
    server = Trickle(request.param)
    yield server
    server.close()


def app_at(project: Project, owner: Any, url: str) -> App:
    app = make_app(project, owner)
    App.objects.filter(pk=app.pk).update(url=url)
    app.refresh_from_db()
    return app


def try_url(app: App) -> str:
    return f"/p/{app.project.slug}/apps/{app.pk}/try/"


def hang_up(answer: Any) -> None:
    """What the WSGI server does when the browser goes away: close the response (without the
    request_finished handler that would close the test's database connection)."""
    request_finished.disconnect(close_old_connections)
    try:
        answer.close()
    finally:
        request_finished.connect(close_old_connections)


def text_of(answer: Any) -> str:
    return "".join(piece.decode() for piece in cast(Any, answer).streaming_content)


@pytest.mark.django_db
def test_a_trickling_app_is_cut_off_at_the_deadline_through_the_page(
    project: Project, owner: Any, owner_client: Client, settings: Any, trickle: Trickle
) -> None:
    settings.TRY_IT_DEADLINE_SECONDS = 1
    app = app_at(project, owner, trickle.url)
    answer = owner_client.post(try_url(app), {"message": "Hi"})
    assert answer.status_code == 200
    text = text_of(answer)
    assert text.endswith(OUT_OF_TIME.format(seconds=1))
    assert text.endswith("[the answer was cut off: Try it stops waiting after 1 s]")
    assert trickle.hung_up.wait(10), "the panel kept the app's connection open"
    assert slot_take(owner.pk)  # the try's slot was given back: two are free again
    assert slot_take(owner.pk)


@pytest.mark.django_db
def test_the_guard_wakes_a_read_blocked_on_the_server(
    project: Project, owner: Any, settings: Any, trickle: Trickle
) -> None:
    """try_open and try_text alone (no view): the deadline holds mid-line, not between lines."""
    settings.TRY_IT_DEADLINE_SECONDS = 1
    guard = Guard(owner.pk)
    answer = try_open(
        app=app_at(project, owner, trickle.url),
        ask=TryRequest(message="Hi", max_tokens=8),
        guard=guard,
    )
    pieces = list(try_text(answer, guard))
    guard.done()
    assert pieces[-1] == OUT_OF_TIME.format(seconds=1) and guard.passed
    assert answer.is_closed and trickle.hung_up.wait(10)


@pytest.mark.django_db
@pytest.mark.parametrize("trickle", ["events"], indirect=True)
def test_a_person_has_at_most_the_cap_of_tries_open(
    project: Project,
    owner: Any,
    member: Any,
    owner_client: Client,
    settings: Any,
    trickle: Trickle,
) -> None:
    settings.TRY_IT_PER_USER = 2
    app = app_at(project, owner, trickle.url)
    held = [owner_client.post(try_url(app), {"message": "Hi"}) for _ in range(2)]
    assert [answer.status_code for answer in held] == [200, 200]
    refused = owner_client.post(try_url(app), {"message": "Hi"})
    assert (refused.status_code, refused.content.decode()) == (
        429,
        "You already have 2 tries waiting for an answer, the most one person may: "
        "wait for one to finish, then send again.",
    )
    colleague = Client()
    colleague.force_login(member)
    other = colleague.post(try_url(app), {"message": "Hi"})
    assert other.status_code == 200  # the cap is per person
    hang_up(held[0])  # the browser went away: its slot is free again
    again = owner_client.post(try_url(app), {"message": "Hi"})
    assert again.status_code == 200
    for answer in (held[1], other, again):
        hang_up(answer)
    last = [owner_client.post(try_url(app), {"message": "Hi"}) for _ in range(3)]
    assert [answer.status_code for answer in last] == [200, 200, 429]
    for answer in last[:2]:
        hang_up(answer)


@pytest.mark.django_db
def test_slots_are_counted_per_person_across_processes_and_lapse(owner: Any, settings: Any) -> None:
    """The count in Redis alone: what one process holds counts in another; a slot its process
    never gave back lapses once the deadline and the margin have passed."""
    settings.TRY_IT_PER_USER, settings.TRY_IT_DEADLINE_SECONDS = 2, 60
    now = time.time()
    first = slot_take(owner.pk, now=now)
    slot_take(owner.pk, now=now)
    with pytest.raises(TryRefused) as refused:
        slot_take(owner.pk, now=now + 10)
    assert refused.value.status == 429
    slot_take(f"{owner.pk}-other", now=now)  # another person
    slot_release(owner.pk, first)
    slot_take(owner.pk, now=now + 10)
    with pytest.raises(TryRefused):
        slot_take(owner.pk, now=now + 60)  # still within the deadline and the margin
    assert slot_take(owner.pk, now=now + 95)  # the three lapsed: a process died holding them
