"""The gateway's throttling kept by the panel's own user-content proxy (`make run`, issue 25):
through the real path (the middleware before the panel's stack, the gate, the proxy to a
stand-in server), a burst from one address, from one app token or of ticket exchanges gets the
gateway's 429 (Retry-After: 1, its sentence, an OpenAI rate_limit_error on an app's host)
without the server being reached, while another address or token passes, and the budget
refills. Then the token buckets themselves (throttle.take) against Redis."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.services import token_create
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from controlpanel.usercontent import throttle
from controlpanel.usercontent.domain import parse_content_domain
from controlpanel.usercontent.tunnel import ContentTunnel
from tests.controlpanel.usercontent.standin import StandIn
from tests.controlpanel.usercontent.test_local_proxy import body, enter

pytestmark = pytest.mark.django_db
TEXT = "Too many requests from your address: wait a moment, then try again.\n"


@pytest.fixture(autouse=True)
def local(settings: Any) -> None:
    """The local backend, and buckets of this test's own (Redis is not emptied between tests)."""
    settings.COMPUTE_BACKEND = "local"
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    settings.REDIS_KEY_PREFIX = f"test-throttle-{uuid.uuid4().hex}"


@pytest.fixture
def notebook(project: Project, owner: Any, standin: StandIn) -> Notebook:
    return Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="local",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.RUNNING,
        url=f"http://127.0.0.1:{standin.port}/?token=t",
    )


def running_app(project: Project, owner: Any, standin: StandIn, *, public: bool) -> App:
    return App.objects.create(
        project=project,
        owner=owner,
        name="chat",
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat", "public": public},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        state=AppState.RUNNING,
        url=f"http://127.0.0.1:{standin.port}",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )


def app_host(app: App) -> str:
    return f"app-{app.pk.hex}.localhost:8000"


def test_a_notebook_burst_from_one_address_gets_the_gateways_429_and_others_pass(
    owner_client: Client, notebook: Notebook, standin: StandIn, settings: Any
) -> None:
    browser, host = enter(owner_client, notebook)  # its ticket exchange, under the default budgets
    settings.AJUSTE_GATEWAY_RATE, settings.AJUSTE_GATEWAY_BURST = 2, 3
    seen = len(standin.seen)
    answers = [browser.get("/lab", HTTP_HOST=host) for _ in range(8)]
    codes = [answer.status_code for answer in answers]
    # 4 at once (the burst of 3 beside the rate's one), perhaps one more refilled meanwhile.
    assert codes[:4] == [200] * 4 and codes[-1] == 429 and set(codes) == {200, 429}
    refusal = answers[-1]
    assert refusal.content.decode() == TEXT
    assert refusal["Retry-After"] == "1" and refusal["Cache-Control"] == "no-store"
    assert refusal["Content-Type"].startswith("text/plain")
    assert len(standin.seen) - seen == codes.count(200)  # a refused request reached nothing
    # Another address is not held back by this one's burst...
    other = browser.get("/lab", HTTP_HOST=host, REMOTE_ADDR="127.0.0.2")
    assert other.status_code == 200 and b"the user's server" in body(other)
    # ...nor this one for long: its budget refills at the rate (2 a second).
    time.sleep(1.2)
    assert browser.get("/lab", HTTP_HOST=host).status_code == 200


def test_an_app_token_burst_holds_back_that_token_only_with_a_rate_limit_error(
    project: Project, owner: Any, member: Any, standin: StandIn, settings: Any
) -> None:
    settings.AJUSTE_GATEWAY_KEY_RATE, settings.AJUSTE_GATEWAY_KEY_BURST = 1, 2
    app = running_app(project, owner, standin, public=False)
    _, mine = token_create(user=owner, name="app")
    _, theirs = token_create(user=member, name="app")
    caller = Client()
    answers = [
        caller.get("/v1/models", HTTP_HOST=app_host(app), HTTP_AUTHORIZATION=f"Bearer {mine}")
        for _ in range(6)
    ]
    codes = [answer.status_code for answer in answers]
    assert codes[:3] == [200] * 3 and codes[-1] == 429
    refusal = answers[-1]
    assert refusal["Retry-After"] == "1" and refusal["Content-Type"] == "application/json"
    error = refusal.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limited"
    assert error["message"].startswith("Too many requests from this address or token")
    # The same address with another token passes: the address's own budget is far from spent.
    theirs_answer = caller.get(
        "/v1/models", HTTP_HOST=app_host(app), HTTP_AUTHORIZATION=f"Bearer {theirs}"
    )
    assert theirs_answer.status_code == 200
    # A public app's burst counts against the address: JSON there too.
    settings.AJUSTE_GATEWAY_RATE, settings.AJUSTE_GATEWAY_BURST = 1, 1
    public = running_app(project, owner, standin, public=True)
    flood = [caller.get("/v1/models", HTTP_HOST=app_host(public)) for _ in range(5)]
    assert flood[-1].status_code == 429 and flood[-1].json()["error"]["type"] == "rate_limit_error"


def test_ticket_exchanges_have_their_own_tighter_budget(
    notebook: Notebook, standin: StandIn, settings: Any
) -> None:
    settings.AJUSTE_GATEWAY_SIGNIN_RATE, settings.AJUSTE_GATEWAY_SIGNIN_BURST = 1, 2
    host = f"nb-{notebook.pk.hex}.localhost:8000"
    browser = Client()
    tries = [browser.get("/_ajuste/ticket?ticket=guess", HTTP_HOST=host) for _ in range(6)]
    assert [t.status_code for t in tries[:3]] == [403, 403, 403]  # asked: no such ticket
    assert tries[-1].status_code == 429 and tries[-1].content.decode() == TEXT  # text, always
    assert tries[-1]["Retry-After"] == "1"
    # The host's own requests are not held back by the sign-in budget (a 302 to sign in).
    assert browser.get("/lab", HTTP_HOST=host).status_code == 302


@pytest.mark.django_db(transaction=True)  # the tunnel closes the request's connections
def test_a_websocket_upgrade_counts_against_the_same_budget(
    notebook: Notebook, settings: Any
) -> None:
    settings.AJUSTE_GATEWAY_RATE, settings.AJUSTE_GATEWAY_BURST = 1, 1
    started: list[tuple[str, list[tuple[str, str]]]] = []
    passed_on: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        passed_on.append(environ["PATH_INFO"])
        return []

    tunnel = ContentTunnel(app)
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/api/kernels/k/channels",
        "HTTP_HOST": f"nb-{notebook.pk.hex}.localhost:8000",
        "HTTP_UPGRADE": "websocket",
        "REMOTE_ADDR": "127.0.0.9",
    }
    answers = [
        b"".join(tunnel(dict(environ), lambda s, h: started.append((s, h)))) for _ in range(3)
    ]
    assert [status for status, _ in started][:2] == ["401 Unauthorized"] * 2  # the gate asked
    assert started[-1][0] == "429 Too Many Requests" and ("Retry-After", "1") in started[-1][1]
    assert answers[-1].decode() == TEXT and not passed_on


def test_a_cluster_panel_leaves_throttling_to_the_gateway(
    notebook: Notebook, settings: Any
) -> None:
    """On Kubernetes the gateway counted the ticket exchange already: the panel counts nothing
    (a second count would halve every budget)."""
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.AJUSTE_GATEWAY_SIGNIN_RATE, settings.AJUSTE_GATEWAY_SIGNIN_BURST = 1, 1
    host = f"nb-{notebook.pk.hex}.localhost:8000"
    tries = [Client().get("/_ajuste/ticket?ticket=guess", HTTP_HOST=host) for _ in range(5)]
    assert {t.status_code for t in tries} == {403}


def bucket(name: str, *, rate: float, burst: int) -> throttle.Bucket:
    return throttle.bucket(name, uuid.uuid4().hex, rate=rate, burst=burst)


def test_a_bucket_holds_its_burst_and_the_rate_then_refills() -> None:
    one = bucket("address", rate=2, burst=3)
    now = 1_000_000.0
    assert [throttle.take([one], now=now) for _ in range(5)] == [True] * 4 + [False]
    assert throttle.take([one], now=now + 0.4) is False  # 0.8 of a token back: not one yet
    assert throttle.take([one], now=now + 0.5) is True  # one token back at 2 a second
    assert throttle.take([one], now=now + 0.5) is False
    # Refilled to its capacity at most, however long it waited.
    later = now + 3600
    assert [throttle.take([one], now=later) for _ in range(5)] == [True] * 4 + [False]


def test_a_refused_request_spends_nothing_from_its_other_buckets() -> None:
    wide = bucket("address", rate=1, burst=9)
    narrow = bucket("key", rate=1, burst=0)
    now = 2_000_000.0
    assert throttle.take([wide, narrow], now=now) is True
    assert [throttle.take([wide, narrow], now=now) for _ in range(3)] == [False] * 3
    # The wide bucket lost only the one request let through: 9 more pass on their own.
    assert [throttle.take([wide], now=now) for _ in range(10)] == [True] * 9 + [False]


def test_a_cluster_panel_answers_content_hosts_unthrottled(
    project: Project, owner: Any, standin: StandIn, settings: Any
) -> None:
    """Nor does it count requests that reach it for a content host (the gateway serves them)."""
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.AJUSTE_GATEWAY_RATE, settings.AJUSTE_GATEWAY_BURST = 1, 1
    app = running_app(project, owner, standin, public=True)
    answers = [Client().get("/v1/models", HTTP_HOST=app_host(app)) for _ in range(5)]
    assert {answer.status_code for answer in answers} == {404}
    assert answers[-1].content.decode().startswith("User content is served by the gateway")


def test_without_redis_requests_pass_and_it_is_logged(settings: Any, caplog: Any) -> None:
    """A throttle that cannot count lets notebooks work rather than taking them all down."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    one = bucket("address", rate=1, burst=0)
    assert [throttle.take([one]) for _ in range(3)] == [True] * 3
    assert "user-content throttle not kept" in caplog.text
