"""The user-content gateway's own throttling and its keeping of the panel's yes, end to end on
loopback (the image's nginx through its entry point, the panel as a live server, a stand-in
server), issue 25:

- a burst from one client address, from one app token, or of ticket exchanges gets 429 with a
  sentence and Retry-After, before the panel is asked, while another address or token passes;
  X-Forwarded-For counts only from the proxies AJUSTE_GATEWAY_REAL_IP_FROM names;
- an app's yes is kept for USER_CONTENT_CACHE_SECONDS under the host and the caller's
  credential: a revoked token still passes within it and is refused after it, another
  caller's (or another host's) request is asked anew, and every request let through, kept yes
  or not, is counted for the app's autoscaler."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings

from controlpanel.accounts.models import ApiToken
from controlpanel.accounts.services import token_create, token_revoke
from controlpanel.core.metrics import store
from controlpanel.engine.backend import job_ref
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from controlpanel.usercontent.domain import parse_content_domain
from deploy import names
from tests.controlpanel.usercontent.gateway import Gateway, free_port, start_gateway
from tests.controlpanel.usercontent.standin import StandIn

pytestmark = pytest.mark.slow

Start = Callable[..., Gateway]


@pytest.fixture
def gateways(live_server: Any, settings: Any) -> Iterator[Start]:
    """Starts gateways with the knobs given, on the content domain's port, asking the panel."""
    panel = live_server.url.replace("localhost", "127.0.0.1")
    port = free_port()
    settings.USER_CONTENT_DOMAIN = parse_content_domain(f"uc.test:{port}")
    settings.KUBERNETES_PANEL_URL = panel
    settings.SITE_URL = panel
    settings.USER_CONTENT_CACHE_SECONDS = 0
    started: list[Gateway] = []

    def start(**knobs: str) -> Gateway:
        gateway = start_gateway(panel, port, **knobs)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


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


def call(
    gateway: Gateway,
    app: App,
    *,
    source: str = "127.0.0.1",
    path: str = "/v1/models",
    **headers: str,
) -> httpx.Response:
    """One request to the app's host through the gateway, from the loopback address `source`."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport) as client:
        host = f"app-{app.pk.hex}.uc.test:{gateway.port}"
        return client.get(
            f"http://127.0.0.1:{gateway.port}{path}", headers={"Host": host, **headers}
        )


def burst(send: Callable[[], httpx.Response], count: int = 15) -> list[httpx.Response]:
    """`count` requests at once (threads), so that a loaded machine still sends them within
    the budget's second."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: send(), range(count)))


def statuses(answers: list[httpx.Response]) -> set[int]:
    return {answer.status_code for answer in answers}


def test_a_burst_from_one_address_is_refused_with_a_sentence_and_others_pass(
    gateways: Start, project: Project, owner: Any, standin: StandIn
) -> None:
    gateway = gateways(AJUSTE_GATEWAY_RATE="1", AJUSTE_GATEWAY_BURST="3")
    app = running_app(project, owner, standin, public=True)
    answers = burst(lambda: call(gateway, app))
    passed = [a for a in answers if a.status_code == 200]
    throttled = [a for a in answers if a.status_code == 429]
    assert passed and throttled and len(passed) + len(throttled) == len(answers)
    refusal = throttled[-1]
    assert refusal.headers["Retry-After"] == "1" and refusal.headers["Cache-Control"] == "no-store"
    message = refusal.json()["error"]
    assert message["type"] == "rate_limit_error"
    assert message["message"].startswith("Too many requests from this address or token")
    assert len(standin.seen) == len(passed)  # a throttled request reached neither panel nor app
    # Another client address is not held back by this one's burst.
    assert call(gateway, app, source="127.0.0.2").status_code == 200
    # Nor is the first one for long: normal use resumes once the budget refills.
    time.sleep(2.5)
    assert call(gateway, app).status_code == 200


def test_forwarded_for_counts_only_from_the_named_proxies(
    gateways: Start, project: Project, owner: Any, standin: StandIn
) -> None:
    gateway = gateways(
        AJUSTE_GATEWAY_RATE="1", AJUSTE_GATEWAY_BURST="2", AJUSTE_GATEWAY_REAL_IP_FROM="127.0.0.1"
    )
    app = running_app(project, owner, standin, public=True)
    # Through the trusted proxy (127.0.0.1): each client its own budget.
    flood = burst(lambda: call(gateway, app, **{"X-Forwarded-For": "203.0.113.7"}))
    assert 429 in statuses(flood)
    calm = call(gateway, app, **{"X-Forwarded-For": "203.0.113.8"})
    assert calm.status_code == 200
    # From an address that is no named proxy, a made-up X-Forwarded-For changes nothing.
    spoofed = burst(
        lambda: call(
            gateway,
            app,
            source="127.0.0.3",
            **{"X-Forwarded-For": f"198.51.100.{time.monotonic_ns() % 250}"},
        )
    )
    assert 429 in statuses(spoofed)


def test_one_token_s_burst_holds_back_that_token_only(
    gateways: Start, project: Project, owner: Any, member: Any, standin: StandIn
) -> None:
    gateway = gateways(AJUSTE_GATEWAY_KEY_RATE="1", AJUSTE_GATEWAY_KEY_BURST="2")
    app = running_app(project, owner, standin, public=False)
    _, mine = token_create(user=owner, name="app")
    _, theirs = token_create(user=member, name="app")
    flood = burst(lambda: call(gateway, app, Authorization=f"Bearer {mine}"))
    assert statuses(flood) == {200, 429}
    throttled = next(answer for answer in flood if answer.status_code == 429)
    assert throttled.json()["error"]["code"] == "rate_limited"
    assert call(gateway, app, Authorization=f"Bearer {theirs}").status_code == 200


def test_ticket_exchanges_have_their_own_tighter_budget(
    gateways: Start, project: Project, owner: Any, standin: StandIn
) -> None:
    gateway = gateways(AJUSTE_GATEWAY_SIGNIN_RATE="1", AJUSTE_GATEWAY_SIGNIN_BURST="2")
    app = running_app(project, owner, standin, public=True)
    tries = [call(gateway, app, path="/_ajuste/ticket?ticket=guess") for _ in range(6)]
    assert [t.status_code for t in tries[:3]] == [403, 403, 403]  # asked: no such ticket
    assert tries[-1].status_code == 429  # 1 a minute, 2 at once: the rest wait a minute
    assert tries[-1].text == "Too many requests from your address: wait a moment, then try again.\n"
    assert call(gateway, app).status_code == 200  # the app's own requests are not held back


def app_counted(app: App) -> int:
    service = names.app_name(job_ref(app))
    raw = store.client(django_settings.REDIS_URL).hget(
        store.key(store.APP_REQUESTS), f"{app.project.namespace}|{service}"
    )
    return int(raw or 0)


def wait_counted(app: App, want: int) -> int:
    """The count, once it reached `want` or 20 s passed (the mirror tells it beside the call)."""
    deadline = time.monotonic() + 20
    while app_counted(app) < want and time.monotonic() < deadline:
        time.sleep(0.1)
    return app_counted(app)


def test_an_apps_yes_is_kept_per_token_and_host_and_every_call_counted(
    gateways: Start,
    project: Project,
    owner: Any,
    outsider: Any,
    standin: StandIn,
    settings: Any,
) -> None:
    settings.USER_CONTENT_CACHE_SECONDS = 300  # kept for the whole test: no race with the clock
    gateway = gateways()
    app = running_app(project, owner, standin, public=False)
    sibling = running_app(project, owner, standin, public=False)
    before = app_counted(app)
    token, mine = token_create(user=owner, name="app")
    _, theirs = token_create(user=outsider, name="app")
    assert call(gateway, app, Authorization=f"Bearer {mine}").status_code == 200
    token_revoke(token=ApiToken.objects.get(pk=token.pk))
    kept = call(gateway, app, Authorization=f"Bearer {mine}")
    assert kept.status_code == 200  # the kept yes, within its time
    # Nobody else is served that yes: another token, no token, the same token on another host.
    stranger = call(gateway, app, Authorization=f"Bearer {theirs}")
    assert stranger.status_code == 403 and stranger.json()["error"]["message"] == "No such app."
    assert call(gateway, app).status_code == 401
    elsewhere = call(gateway, sibling, Authorization=f"Bearer {mine}")
    assert elsewhere.status_code == 401
    assert "revoked" in elsewhere.json()["error"]["message"]
    assert len(standin.seen) == 2
    # Both calls counted for the autoscaler, the kept one too; the refusals not.
    assert wait_counted(app, before + 2) == before + 2


def test_a_revoked_token_is_refused_once_the_cache_time_is_over(
    gateways: Start, project: Project, owner: Any, outsider: Any, standin: StandIn, settings: Any
) -> None:
    settings.USER_CONTENT_CACHE_SECONDS = 2
    gateway = gateways()
    app = running_app(project, owner, standin, public=False)
    token, raw = token_create(user=owner, name="app")
    _, theirs = token_create(user=outsider, name="app")
    assert call(gateway, app, Authorization=f"Bearer {raw}").status_code == 200
    # Within those seconds another project's member asks: refused, not served the kept yes.
    assert call(gateway, app, Authorization=f"Bearer {theirs}").status_code == 403
    token_revoke(token=ApiToken.objects.get(pk=token.pk))
    time.sleep(3.5)  # past the 2 s the panel allowed (nginx's clock ticks in whole seconds)
    refused = call(gateway, app, Authorization=f"Bearer {raw}")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
