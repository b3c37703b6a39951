"""Issue #16 end to end on the local backend (real worker, beat and watcher processes): a tiny
Llama and a LoRA adapter in a project bucket become an app through the API; the official
`openai` client gets a chat answer (whole and streamed) and a completion at the app's own host
(`app-<id>.localhost:<port>`, the panel's proxy under make run) with a project member's API
token; without a token, with a wrong one, or with another project's member's token the call is
refused and never reaches the server; stopped and started, the app answers at the same URL.
The token never appears in the server's log."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from controlpanel.accounts.services import token_create
from controlpanel.engine.backend import job_ref
from tests.fixtures.apps import wait_state
from tests.fixtures.panel import api_client_for


@pytest.fixture
def localhost_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """`*.localhost` resolves to loopback, as browsers and systemd-resolved resolve it (RFC
    6761), where this machine's resolver knows only `localhost` itself."""
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "localhost"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


@pytest.mark.e2e
@pytest.mark.slow
def test_an_app_answers_the_openai_client_through_the_panel_and_only_with_a_project_token(
    live_server: Any,
    local_processes: Any,
    deploy_tiny_app: Any,
    owner: Any,
    outsider: Any,
    local_jobs: Any,
    settings: Any,
    localhost_names: None,
) -> None:
    procs = local_processes
    api = api_client_for(owner)
    app, body = deploy_tiny_app("tiny chat")
    base_url = body["url"]
    port = urlsplit(live_server.url).port
    assert base_url == f"http://app-{app.pk.hex}.localhost:{port}/v1"
    assert body["config"]["model_name"] == "tiny-chat"
    _, raw = token_create(user=owner, name="app client")
    try:
        wait_state(app, {"RUNNING"}, procs)
        client = openai.OpenAI(base_url=base_url, api_key=raw, max_retries=0)
        assert [m.id for m in client.models.list()] == ["tiny-chat"]
        answer = client.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert answer.choices[0].message.role == "assistant"
        assert answer.choices[0].message.content and answer.usage.completion_tokens >= 1
        stream = client.chat.completions.create(
            model="tiny-chat",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=8,
            stream=True,
        )
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        assert "".join(pieces)
        completion = client.completions.create(model="tiny-chat", prompt="Q: hi", max_tokens=4)
        assert completion.choices[0].finish_reason in ("length", "stop")

        # Refused: no token, a wrong one, another project's member's (not even told it exists).
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base_url, api_key="ajt_wrong", max_retries=0).models.list()
        bare = httpx.post(f"{base_url}/chat/completions", json={"model": "tiny-chat"})
        assert bare.status_code == 401 and bare.headers["WWW-Authenticate"] == "Bearer"
        _, stranger = token_create(user=outsider, name="stranger")
        with pytest.raises(openai.PermissionDeniedError, match="No such app"):
            openai.OpenAI(base_url=base_url, api_key=stranger, max_retries=0).models.list()
        # An app that does not exist reads the same as one of another project.
        unknown = base_url.replace(app.pk.hex, uuid.uuid4().hex)
        with pytest.raises(openai.PermissionDeniedError, match="No such app"):
            openai.OpenAI(base_url=unknown, api_key=stranger, max_retries=0).models.list()

        # Stop: the URL says so; start: the same URL answers again.
        assert api.post(f"/api/v1/apps/{app.pk}/stop/").status_code == 200
        wait_state(app, {"STOPPED"}, procs)
        stopped = httpx.get(f"{base_url}/models", headers={"Authorization": f"Bearer {raw}"})
        assert stopped.status_code == 403
        assert stopped.json()["error"]["message"] == (
            "The app is not running: start it from the panel."
        )
        assert api.post(f"/api/v1/apps/{app.pk}/start/").status_code == 200
        wait_state(app, {"RUNNING"}, procs)
        assert api.get(f"/api/v1/apps/{app.pk}/").json()["url"] == base_url
        assert [m.id for m in client.models.list()] == ["tiny-chat"]
        log = (Path(settings.VAR_DIR) / "workloads").rglob("output.log")
        assert all(raw not in path.read_text() and stranger not in path.read_text() for path in log)
    finally:
        procs.stop_all()
        local_jobs.delete_app(ref=job_ref(app))  # the detached server goes with its run
