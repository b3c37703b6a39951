"""The user-content gateway end to end on loopback: the image's nginx configuration (started by
its own entry point), the panel (live server) answering its auth_request, and a stand-in
notebook or app server recording what reaches it. The ticket exchange from the panel's Open to
the host's own cookie; what the server gets (never the content cookie nor the caller's
Authorization, the editor's token for a notebook); websockets and streaming; refusals with
their reason; the cache and its bound."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import websocket
from django.contrib.sessions.models import Session
from django.test import Client

from controlpanel.accounts.services import token_create
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.auth import notebook_token
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from controlpanel.usercontent.domain import parse_content_domain
from tests.controlpanel.usercontent.gateway import Gateway, free_port, start_gateway
from tests.controlpanel.usercontent.standin import StandIn

pytestmark = pytest.mark.slow


@pytest.fixture
def gateway(live_server: Any, settings: Any) -> Iterator[Gateway]:
    panel = live_server.url.replace("localhost", "127.0.0.1")
    port = free_port()
    settings.USER_CONTENT_DOMAIN = parse_content_domain(f"uc.test:{port}")
    settings.KUBERNETES_PANEL_URL = panel
    settings.SITE_URL = panel
    settings.USER_CONTENT_CACHE_SECONDS = 0
    started = start_gateway(panel, port)
    yield started
    started.stop()


class Browser:
    """What a browser does with the panel's and the content host's cookies, by hand: the
    panel's session goes to the panel, the host's cookie to the gateway at that host."""

    def __init__(self, gateway: Gateway, panel: str, user: Any) -> None:
        self.gateway = gateway
        self.panel = panel
        client = Client()
        client.force_login(user)
        self.session = client.cookies["sessionid"].value
        self.content: dict[str, str] = {}

    def open(self, path: str) -> httpx.Response:
        """A GET of a panel page (Open), not followed."""
        return httpx.get(f"{self.panel}{path}", cookies={"sessionid": self.session})

    def visit(self, url: str, **kwargs: Any) -> httpx.Response:
        """A request to a content host's URL, through the gateway, with that host's cookie."""
        parts = urlsplit(url)
        headers = {"Host": parts.netloc, **kwargs.pop("headers", {})}
        cookie = self.content.get(parts.netloc)
        if cookie:
            headers["Cookie"] = "; ".join(filter(None, [headers.get("Cookie"), cookie]))
        target = f"http://127.0.0.1:{self.gateway.port}{parts.path}"
        if parts.query:
            target += f"?{parts.query}"
        answer = httpx.request(kwargs.pop("method", "GET"), target, headers=headers, **kwargs)
        for name, value in answer.cookies.items():
            self.content[parts.netloc] = f"{name}={value}"
        return answer

    def enter(self, open_path: str) -> str:
        """Open on the panel, then the ticket on the host: the host's URL landed on."""
        ticket = self.open(open_path)
        assert ticket.status_code == 302, ticket.text
        landed = self.visit(ticket.headers["Location"])
        assert landed.status_code == 302, landed.text
        parts = urlsplit(ticket.headers["Location"])
        return f"{parts.scheme}://{parts.netloc}{landed.headers['Location']}"


def running_notebook(project: Project, owner: Any, standin: StandIn) -> Notebook:
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="local",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.RUNNING,
    )
    url = f"http://127.0.0.1:{standin.port}/?token=t"
    Notebook.objects.filter(pk=notebook.pk).update(url=url)
    return Notebook.objects.get(pk=notebook.pk)


def host_of(prefix: str, workload: Any, gateway: Gateway) -> str:
    return f"http://{prefix}-{workload.pk.hex}.uc.test:{gateway.port}"


def test_open_gives_the_host_its_own_cookie_and_the_server_neither_it_nor_the_callers(
    gateway: Gateway, live_server: Any, project: Project, owner: Any, standin: StandIn
) -> None:
    notebook = running_notebook(project, owner, standin)
    browser = Browser(gateway, live_server.url, owner)
    landed = browser.enter(f"/usercontent/open/?host=nb-{notebook.pk.hex}&next=/lab/tree/x")
    assert landed == f"{host_of('nb', notebook, gateway)}/lab/tree/x"
    cookie = browser.content[urlsplit(landed).netloc]
    assert cookie.startswith("ajuste-content=")
    answer = browser.visit(
        landed, headers={"Cookie": "_xsrf=kept", "Authorization": "Bearer the-callers-own"}
    )
    assert answer.status_code == 200 and b"the user's server" in answer.content
    seen = standin.seen[-1]
    assert seen.path == "/lab/tree/x"
    assert seen.headers["cookie"] == "_xsrf=kept"  # the server's own cookies pass, ours not
    assert seen.headers["authorization"] == f"token {notebook_token(notebook)}"
    assert seen.headers["host"] == urlsplit(landed).netloc
    assert "sessionid" not in seen.headers["cookie"]


def test_a_ticket_opens_once_for_its_own_host_only(
    gateway: Gateway, live_server: Any, project: Project, owner: Any, standin: StandIn
) -> None:
    notebook = running_notebook(project, owner, standin)
    other = running_notebook(project, owner, standin)
    browser = Browser(gateway, live_server.url, owner)
    ticket = browser.open(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
    url = ticket.headers["Location"]
    query = urlsplit(url).query
    elsewhere = browser.visit(f"{host_of('nb', other, gateway)}/_ajuste/ticket?{query}")
    assert elsewhere.status_code == 403 and "used or has expired" in elsewhere.text
    assert browser.visit(url).status_code == 302
    again = browser.visit(url)
    assert again.status_code == 403 and "used or has expired" in again.text
    assert standin.seen == []


def test_without_the_cookie_a_browser_is_sent_to_sign_in_and_back(
    gateway: Gateway, live_server: Any, project: Project, owner: Any, standin: StandIn
) -> None:
    notebook = running_notebook(project, owner, standin)
    browser = Browser(gateway, live_server.url, owner)
    bounced = browser.visit(f"{host_of('nb', notebook, gateway)}/lab?reset")
    assert bounced.status_code == 302
    signin = urlsplit(bounced.headers["Location"])
    assert f"{signin.scheme}://{signin.netloc}" == live_server.url.replace("localhost", "127.0.0.1")
    landed = browser.enter(f"{signin.path}?{signin.query}")
    assert urlsplit(landed).path == "/lab" and urlsplit(landed).query == "reset"
    assert browser.visit(landed).status_code == 200
    assert len(standin.seen) == 1


def test_a_cookie_counts_only_on_its_host_and_from_its_own_pages(
    gateway: Gateway, live_server: Any, project: Project, owner: Any, standin: StandIn
) -> None:
    notebook = running_notebook(project, owner, standin)
    other = running_notebook(project, owner, standin)
    browser = Browser(gateway, live_server.url, owner)
    landed = browser.enter(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
    cookie = browser.content[urlsplit(landed).netloc]
    moved = browser.visit(f"{host_of('nb', other, gateway)}/", headers={"Cookie": cookie})
    assert moved.status_code == 302 and "/usercontent/open/" in moved.headers["Location"]
    # A page of another workload's host (same site) posting with the browser's cookie.
    forged = browser.visit(
        landed,
        method="POST",
        content=b"{}",
        headers={"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Origin": "http://x"},
    )
    assert forged.status_code == 302
    no_fetch_metadata = browser.visit(landed, method="POST", headers={"Origin": "http://x"})
    assert no_fetch_metadata.status_code == 302
    assert standin.seen == []
    origin = host_of("nb", notebook, gateway)
    own = browser.visit(landed, method="POST", content=b"{}", headers={"Origin": origin})
    assert own.status_code == 200 and [s.method for s in standin.seen] == ["POST"]


def test_an_outsider_gets_no_ticket_and_a_logged_out_session_no_page(
    gateway: Gateway,
    live_server: Any,
    project: Project,
    owner: Any,
    outsider: Any,
    standin: StandIn,
) -> None:
    notebook = running_notebook(project, owner, standin)
    stranger = Browser(gateway, live_server.url, outsider)
    refused = stranger.open(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
    assert refused.status_code == 404 and 'data-testid="not-found"' in refused.text
    browser = Browser(gateway, live_server.url, owner)
    landed = browser.enter(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
    assert browser.visit(landed).status_code == 200
    Notebook.objects.filter(pk=notebook.pk).update(state=NotebookState.STOPPED)
    stopped = browser.visit(landed)
    assert stopped.status_code == 403
    assert stopped.text == "The notebook is not running: start it from the panel.\n"
    Notebook.objects.filter(pk=notebook.pk).update(state=NotebookState.RUNNING)
    Session.objects.filter(session_key=browser.session).delete()  # logged out of the panel
    assert browser.visit(landed).status_code == 302
    assert len(standin.seen) == 1


def test_the_gateway_keeps_a_yes_for_its_cache_time_and_no_longer_than_the_cookie_says(
    gateway: Gateway,
    live_server: Any,
    project: Project,
    owner: Any,
    standin: StandIn,
    settings: Any,
) -> None:
    """USER_CONTENT_CACHE_SECONDS bounds revocation: within it a kept yes answers (here 300 s,
    so that the test does not race the clock); any other Cookie header is asked anew."""
    settings.USER_CONTENT_CACHE_SECONDS = 300
    notebook = running_notebook(project, owner, standin)
    browser = Browser(gateway, live_server.url, owner)
    landed = browser.enter(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
    assert browser.visit(landed).status_code == 200
    Session.objects.filter(session_key=browser.session).delete()
    assert browser.visit(landed).status_code == 200  # the kept yes
    changed = browser.visit(landed, headers={"Cookie": "_xsrf=new"})
    assert changed.status_code == 302  # asked anew: the session is gone


def test_websockets_and_streams_pass_as_they_come(
    gateway: Gateway, live_server: Any, project: Project, owner: Any, standin: StandIn
) -> None:
    notebook = running_notebook(project, owner, standin)
    browser = Browser(gateway, live_server.url, owner)
    landed = urlsplit(browser.enter(f"/usercontent/open/?host=nb-{notebook.pk.hex}"))
    socket = websocket.create_connection(
        f"ws://127.0.0.1:{gateway.port}/api/kernels/k/channels",
        host=landed.netloc,
        origin=f"http://{landed.netloc}",
        cookie=browser.content[landed.netloc],
        timeout=30,
    )
    socket.send("a kernel message")
    assert socket.recv() == "a kernel message"
    socket.close()
    assert standin.seen[-1].headers["authorization"] == f"token {notebook_token(notebook)}"
    headers = {"Host": landed.netloc, "Cookie": browser.content[landed.netloc]}
    with httpx.stream(
        "GET", f"http://127.0.0.1:{gateway.port}/events/stream", headers=headers, timeout=30
    ) as stream:
        chunks = stream.iter_raw()
        first = next(chunks)
        assert first.startswith(b"data: 0"), first  # before the server sent the rest
        standin.release.set()
        rest = b"".join(chunks)
    assert b"data: 1" in rest and b"data: 2" in rest
    upgrade = {
        "Host": landed.netloc,
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    refused = httpx.get(f"http://127.0.0.1:{gateway.port}/ws", headers=upgrade)
    assert refused.status_code == 302 and "/usercontent/open/" in refused.headers["Location"]
    assert not standin.seen[-1].path.endswith("/ws")


def test_an_app_takes_project_tokens_and_says_why_not_in_json(
    gateway: Gateway,
    live_server: Any,
    project: Project,
    owner: Any,
    outsider: Any,
    standin: StandIn,
) -> None:
    app = App.objects.create(
        project=project,
        owner=owner,
        name="chat",
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat", "public": False},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        state=AppState.RUNNING,
        url=f"http://127.0.0.1:{standin.port}",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    base = f"{host_of('app', app, gateway)}/v1/models"
    browser = Browser(gateway, live_server.url, owner)
    anonymous = browser.visit(base)
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == "Bearer"
    assert anonymous.json()["error"]["message"].startswith("Send a project API token")
    _, mine = token_create(user=owner, name="app")
    _, theirs = token_create(user=outsider, name="app")
    stranger = browser.visit(base, headers={"Authorization": f"Bearer {theirs}"})
    assert stranger.status_code == 403 and stranger.json()["error"]["message"] == "No such app."
    member = browser.visit(base, headers={"Authorization": f"Bearer {mine}"})
    assert member.status_code == 200
    assert "authorization" not in standin.seen[-1].headers  # the token stays with the gateway
    App.objects.filter(pk=app.pk).update(state=AppState.STOPPED)
    stopped = browser.visit(base, headers={"Authorization": f"Bearer {mine}"})
    assert stopped.status_code == 403 and "not running" in stopped.json()["error"]["message"]
    assert len(standin.seen) == 1
