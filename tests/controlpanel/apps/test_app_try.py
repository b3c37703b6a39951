""" "Try it" on an app's page: a signed-in member's message goes through the panel (session and
CSRF token, no API token in the page) to the app's server, and the answer streams back as
text, from the local server or, on a cluster, the app's Service. Refusals are precise: bad
input (400), an app that is not serving (409), a server that does not answer (502); another
project's member gets 404 and an anonymous caller the log-in page
(tests/controlpanel/test_isolation.py covers the route like every other)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from django.test import Client
from playwright.sync_api import expect

from controlpanel.engine.backend import job_ref
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.try_it import MAX_MESSAGE, server_url
from deploy.manifests import make_app_service
from tests.controlpanel.apps.test_app_access import make_app
from tests.deploy.test_app_manifests import make_app_request
from tests.fixtures.apps import tiny_model_and_adapter, wait_state
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.faults import free_port
from tests.fixtures.panel import PASSWORD, api_client_for


def try_url(app: App) -> str:
    return f"/p/{app.project.slug}/apps/{app.pk}/try/"


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, "the page has no CSRF token"
    return found.group(1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        ({}, 400, "message: write something to send."),
        ({"message": "x" * (MAX_MESSAGE + 1)}, 400, f"message: at most {MAX_MESSAGE} characters."),
        ({"message": "Hi", "max_tokens": "many"}, 400, "max_tokens: 'many' is not a whole number."),
        ({"message": "Hi", "max_tokens": "0"}, 400, "max_tokens: from 1 to 1024."),
        ({"message": "Hi"}, 409, "The app is STOPPED: start it, then try again once RUNNING."),
    ],
)
def test_refusals_are_one_precise_line(
    project: Project,
    owner: Any,
    owner_client: Client,
    data: dict[str, str],
    status: int,
    message: str,
) -> None:
    app = make_app(project, owner, state="STOPPED")
    answer = owner_client.post(try_url(app), data)
    assert (answer.status_code, answer.content.decode()) == (status, message)
    assert answer["Content-Type"] == "text/plain; charset=utf-8"


@pytest.mark.django_db
def test_on_a_cluster_the_apps_service_is_the_address(
    project: Project, owner: Any, settings: Any
) -> None:
    """APP_SERVICE_URL's default: the Service deploy/manifests/apps.py makes, by its DNS name."""
    settings.COMPUTE_BACKEND = "kubernetes"
    app = make_app(project, owner)
    App.objects.filter(pk=app.pk).update(url="https://apps.example.com/a/alpha/x/")
    app.refresh_from_db()
    built = make_app_request(id=str(app.pk), project="alpha", namespace=project.namespace)
    service = make_app_service(app=built)["metadata"]
    assert (service["name"], service["namespace"]) == (f"app-{app.pk}", "ajuste-alpha")
    expected = f"http://app-{app.pk}.ajuste-alpha.svc.cluster.local:80"
    assert server_url(app) == expected


@pytest.mark.slow
@pytest.mark.django_db
def test_on_a_cluster_try_it_streams_from_the_apps_service_to_members_only(
    project: Project,
    owner: Any,
    member: Any,
    outsider: Any,
    owner_client: Client,
    settings: Any,
    tiny_server: str,
) -> None:
    """The Kubernetes backend: the panel reaches the app through APP_SERVICE_URL (here a real
    OpenAI-compatible server on loopback stands for the Service), never the public URL, with
    no credential of the member's; another project's member gets 404, anonymous the log-in."""
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.APP_SERVICE_URL = tiny_server  # the placeholders are optional
    app = make_app(project, owner)
    App.objects.filter(pk=app.pk).update(url="https://apps.example.invalid/a/alpha/x/")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(member)
    page = browser.get(f"/p/alpha/apps/{app.pk}/").content.decode()
    assert "data-try-answer" in page and "ajt_" not in page
    answer = browser.post(
        try_url(app), {"message": "Hello", "max_tokens": "8"}, HTTP_X_CSRFTOKEN=csrf_of(page)
    )
    assert answer.status_code == 200 and answer.streaming
    text = "".join(piece.decode() for piece in cast(Any, answer).streaming_content)
    assert text.strip() and "[the answer was cut off" not in text and "data:" not in text

    stranger = Client()
    stranger.force_login(outsider)
    assert stranger.post(try_url(app), {"message": "Hello"}).status_code == 404
    anonymous = Client().post(try_url(app), {"message": "Hello"})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert owner_client.get(try_url(app)).status_code == 405

    # The Service not answering: one line, 502.
    settings.APP_SERVICE_URL = f"http://127.0.0.1:{free_port()}"
    refused = owner_client.post(try_url(app), {"message": "Hello"})
    assert (refused.status_code, refused.content) == (502, b"The app's server did not answer.")


@pytest.mark.e2e
@pytest.mark.slow
def test_try_it_streams_the_apps_answer_to_a_signed_in_member_only(
    local_processes: Any,
    deploy_tiny_app: Any,
    owner: Any,
    member: Any,
    outsider: Any,
    local_jobs: Any,
) -> None:
    procs = local_processes
    api = api_client_for(owner)
    app, _ = deploy_tiny_app("try me")
    try:
        wait_state(app, {"RUNNING"}, procs)
        browser = Client(enforce_csrf_checks=True)  # a browser: the CSRF check is on
        browser.force_login(member)  # a plain member, not the manager who deployed it
        page = browser.get(f"/p/alpha/apps/{app.pk}/").content.decode()
        assert "js/app_try" in page and "data-try-answer" in page and "ajt_" not in page
        assert browser.post(try_url(app), {"message": "Hello"}).status_code == 403  # no token

        answer = browser.post(
            try_url(app), {"message": "Hello", "max_tokens": "8"}, HTTP_X_CSRFTOKEN=csrf_of(page)
        )
        assert answer.status_code == 200 and answer.streaming
        assert answer["Content-Type"] == "text/plain; charset=utf-8"
        pieces = [piece.decode() for piece in cast(Any, answer).streaming_content]
        text = "".join(pieces)
        assert text.strip() and "[the answer was cut off" not in text, pieces
        assert "data:" not in text and "[DONE]" not in text  # the text, not the events

        stranger = Client()
        stranger.force_login(outsider)
        assert stranger.post(try_url(app), {"message": "Hello"}).status_code == 404
        anonymous = Client().post(try_url(app), {"message": "Hello"})
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")

        assert api.post(f"/api/v1/apps/{app.pk}/stop/").status_code == 200
        wait_state(app, {"STOPPED"}, procs)
        stopped = browser.post(try_url(app), {"message": "Hello"}, HTTP_X_CSRFTOKEN=csrf_of(page))
        assert stopped.status_code == 409 and b"The app is STOPPED" in stopped.content
    finally:
        procs.stop_all()
        local_jobs.delete_app(ref=job_ref(app))


@pytest.fixture
def tiny_server(tmp_path: Path) -> Iterator[str]:
    """The local backend's server (deploy/local/serve.py) on a loopback port, with the tiny
    model and its adapter: what a RUNNING app of the local backend is behind."""
    model_dir, adapter_dir = tiny_model_and_adapter(tmp_path / "assets")
    port = free_port()
    argv = [sys.executable, "-P", "-m", "deploy.local.serve", "--model", str(model_dir)]
    argv += ["--adapter", str(adapter_dir), "--name", "chat", "--port", str(port)]
    server = subprocess.Popen(argv, cwd=Path(__file__).parents[3])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, "the server exited"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        else:
            raise AssertionError("the server did not become ready in 120 s")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_try_it_in_chromium_under_the_csp(
    page: Any, live_server: Any, member: Any, owner: Any, project: Project, tiny_server: str
) -> None:
    """The page's script sends the form and shows the streamed text, then a refusal, with no
    console error (a CSP violation would be one)."""
    app = make_app(project, owner)
    App.objects.filter(pk=app.pk).update(url=tiny_server)
    browser_login(page, live_server.url, member.username, PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/apps/{app.pk}/")
    page.fill("#try-message", "Hello")
    page.fill("#try-max-tokens", "8")
    page.click("[data-try-send]")
    expect(page.locator("[data-try-status]")).to_have_text("Done.", timeout=60_000)
    answer = page.locator("[data-testid=try-answer]")
    assert answer.text_content()
    assert answer.evaluate("e => e.children.length") == 0  # text, never markup
    App.objects.filter(pk=app.pk).update(state="STOPPED")
    page.click("[data-try-send]")
    status = page.locator("[data-try-status]")
    expect(status).to_have_text("The app is STOPPED: start it, then try again once RUNNING.")
    expect(status).to_have_class(re.compile("field-error"))
    # Chromium logs the refused request's 409; that one, and only it, is expected.
    errors = console_errors(page)
    refused = "the server responded with a status of 409 (Conflict)"
    assert errors == [f"Failed to load resource: {refused} [{live_server.url}{try_url(app)}:0]"]
    errors.clear()
