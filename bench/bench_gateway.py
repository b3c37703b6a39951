"""What the user-content gateway adds (issue 25): the image's nginx (images/gateway, started by
its own entry point as tests/controlpanel/usercontent/gateway.py does) in front of a stand-in
notebook server on loopback, asking the panel (gunicorn, 1 worker x 8 threads, PostgreSQL) at
every request. Per request: GET latency straight to the server and through the gateway, with
the panel's yes not cached (USER_CONTENT_CACHE_SECONDS=0: every request asks) and cached (5 s,
the default), for a notebook (its cookie) and for an app called with a project API token (its
yes kept under the token; each call still told to the panel for the autoscaler, by nginx's
mirror). Per websocket message: an echo's round trip on an open socket, straight and through
the gateway (the panel is asked once, at the upgrade). The gateway's throttling is set out of
the way (one client sends faster than its default 100 requests a second).

    .venv/bin/python bench/bench_gateway.py [--requests 400] [--messages 2000]

One client, sequential requests (latency, not throughput); p50 and p95 by nearest rank."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _panel import (
    configure,
    free_port,
    fresh_database,
    gunicorn,
    nearest_rank,
    start,
    stop,
    wait_http,
)


def timed(call: Callable[[Any], object], arg: Any, *, count: int) -> list[float]:
    """Milliseconds of each of `count` calls of `call(arg)`, one after the other."""
    out = []
    for _ in range(count):
        began = time.perf_counter()
        call(arg)
        out.append((time.perf_counter() - began) * 1000)
    return out


def ok(client: Any) -> Callable[[str], object]:
    """client.get that insists on a 200 (a refusal or a 429 timed would flatter the gateway)."""

    def get(path: str) -> object:
        answer = client.get(path)
        assert answer.status_code == 200, (answer.status_code, answer.text[:200])
        return answer

    return get


def row(name: str, values: list[float], base: list[float] | None = None) -> str:
    p50, p95 = nearest_rank(values, 50), nearest_rank(values, 95)
    added = ""
    if base is not None:
        more50, more95 = p50 - nearest_rank(base, 50), p95 - nearest_rank(base, 95)
        added = f"  added p50 {more50:.2f} ms, p95 {more95:.2f} ms"
    return f"{name:<34} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms{added}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    panel_port, gateway_port = free_port(), free_port()
    panel = f"http://127.0.0.1:{panel_port}"
    domain = f"uc.test:{gateway_port}"
    configure(
        "ajuste_bench_gateway",
        2,
        COMPUTE_BACKEND="local",
        SITE_URL=panel,
        KUBERNETES_PANEL_URL=panel,
        USER_CONTENT_DOMAIN=domain,
        AJUSTE_LOCAL_BACKEND_TRUSTED="1",
    )
    fresh_database()
    import django

    django.setup()
    import httpx
    import websocket
    from django.test import Client

    from controlpanel.accounts.services import token_create
    from controlpanel.flavors.models import Flavor
    from controlpanel.notebooks.models import Notebook
    from controlpanel.served.models import App
    from controlpanel.usercontent.hosts import content_host
    from controlpanel.usercontent.tickets import (
        cookie_name,
        cookie_value,
        ticket_issue,
        ticket_redeem,
    )
    from tests.controlpanel.usercontent.gateway import start_gateway
    from tests.controlpanel.usercontent.standin import start_standin
    from tests.fixtures.panel import ProjectFactory, UserFactory, add_member

    _, server = start_standin()
    user = UserFactory(username="bench")
    project = ProjectFactory(slug="bench", name="Bench")
    add_member(project, user, "manager")
    notebook = Notebook.objects.create(
        project=project, owner=user, name="nb", image="local", editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"), state="RUNNING",
        url=f"http://127.0.0.1:{server.server_address[1]}/",
    )  # fmt: skip
    app = App.objects.create(
        project=project, owner=user, name="chat", image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat", "public": False},
        volumes=["b@LOCAL/m:/workspace/model:ro"], state="RUNNING",
        url=f"http://127.0.0.1:{server.server_address[1]}",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )  # fmt: skip
    _, raw_token = token_create(user=user, name="bench")
    app_headers = {
        "Host": content_host("app", app.pk).netloc,
        "Authorization": f"Bearer {raw_token}",
    }
    browser = Client()
    browser.force_login(user)
    session_key = browser.session.session_key
    host = content_host("nb", notebook.pk)
    url = ticket_issue(
        user=user, session_key=session_key or "", kind="notebook", host=host, next_path="/"
    )
    ticket = ticket_redeem(raw=url.split("ticket=", 1)[1], host=host)
    assert ticket is not None
    cookie = f"{cookie_name()}={cookie_value(ticket, host)}"
    headers = {"Host": host.netloc, "Cookie": cookie}
    from controlpanel.usercontent.gate import Visit, gate_check

    verdict = gate_check(Visit(host=host.netloc, cookie=cookie, path="/lab"))
    assert verdict.status == 200, verdict
    logs = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    results = []
    for cache in ("0", "5"):
        procs = start({"web": gunicorn(panel_port, 1)}, logs, USER_CONTENT_CACHE_SECONDS=cache)
        unthrottled = {
            f"AJUSTE_GATEWAY_{knob}": "1000000"
            for knob in ("RATE", "BURST", "KEY_RATE", "KEY_BURST")
        }
        gateway = start_gateway(panel, gateway_port, **unthrottled)
        try:
            wait_http(f"{panel}/healthz")
            # A new connection per request, as nginx opens to the server (http.server's
            # keep-alive answers wait on delayed ACKs, 40 ms, which would flatter the gateway).
            direct = httpx.Client(
                base_url=f"http://127.0.0.1:{server.server_address[1]}",
                limits=httpx.Limits(max_keepalive_connections=0),
            )
            through = httpx.Client(base_url=f"http://127.0.0.1:{gateway_port}", headers=headers)
            assert through.get("/lab").status_code == 200, through.get("/lab").text
            for _ in range(20):  # warm both paths
                direct.get("/lab"), through.get("/lab")
            calls = httpx.Client(base_url=f"http://127.0.0.1:{gateway_port}", headers=app_headers)
            assert calls.get("/v1/models").status_code == 200, calls.get("/v1/models").text
            for _ in range(20):
                calls.get("/v1/models")
            base = timed(direct.get, "/lab", count=args.requests)
            gated = timed(ok(through), "/lab", count=args.requests)
            called = timed(ok(calls), "/v1/models", count=args.requests)
            results.append(row("GET straight to the server", base))
            results.append(row(f"GET through the gateway, cache {cache} s", gated, base))
            results.append(row(f"app call with a token, cache {cache} s", called, base))
            if cache == "0":
                ws_direct = websocket.create_connection(
                    f"ws://127.0.0.1:{server.server_address[1]}/ws", timeout=30
                )
                ws_gated = websocket.create_connection(
                    f"ws://127.0.0.1:{gateway_port}/ws", host=host.netloc,
                    origin=f"http://{host.netloc}", cookie=cookie, timeout=30,
                )  # fmt: skip

                def echo(sock: websocket.WebSocket) -> None:
                    sock.send("x" * 100)
                    sock.recv()

                wbase = timed(echo, ws_direct, count=args.messages)
                wgated = timed(echo, ws_gated, count=args.messages)
                results.append(row("websocket echo straight", wbase))
                results.append(row("websocket echo through the gateway", wgated, wbase))
                ws_direct.close(), ws_gated.close()
        finally:
            gateway.stop()
            stop(procs)
    server.shutdown()
    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.requests} requests, {args.messages} messages"
    )
    print("\n".join(results))


if __name__ == "__main__":
    main()
