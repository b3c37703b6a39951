"""The panel's own user-content proxy (the local backend, `make run`) through Django's test
client: content hosts are taken before the panel's stack, the ticket sets the host's cookie,
what the server receives, the same refusals as the gateway's, and the auth endpoint that
answers only at the panel's cluster-internal address."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.auth import notebook_token
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.usercontent.domain import parse_content_domain
from tests.controlpanel.usercontent.standin import StandIn

pytestmark = pytest.mark.django_db
INTERNAL = "ajuste-web.ajuste.svc.cluster.local"


@pytest.fixture
def notebook(project: Project, owner: Any, standin: StandIn, settings: Any) -> Notebook:
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    settings.COMPUTE_BACKEND = "local"
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="local",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.RUNNING,
        url=f"http://127.0.0.1:{standin.port}/?token=t",
    )
    return notebook


def enter(owner_client: Client, notebook: Notebook) -> tuple[Client, str]:
    """A browser's content-host side after Open: its client (no panel cookie) and host."""
    ticket = owner_client.get(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
    assert ticket.status_code == 302, ticket.content
    url = urlsplit(ticket["Location"])
    assert url.netloc == f"nb-{notebook.pk.hex}.localhost:8000"
    browser = Client()
    landed = browser.get(f"{url.path}?{url.query}", HTTP_HOST=url.netloc)
    assert landed.status_code == 302 and landed["Location"] == "/"
    cookie = landed.cookies["ajuste-content"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
    assert not cookie["domain"] and not cookie["secure"]  # host-only; plain http here
    assert "sessionid" not in landed.cookies and "csrftoken" not in landed.cookies
    return browser, url.netloc


def body(answer: Any) -> bytes:
    return b"".join(answer.streaming_content) if answer.streaming else answer.content


def test_the_server_gets_the_request_without_our_cookie_nor_the_callers_token(
    owner_client: Client, notebook: Notebook, standin: StandIn
) -> None:
    browser, host = enter(owner_client, notebook)
    browser.cookies["_xsrf"] = "kept"
    answer = browser.get("/lab?x=1", HTTP_HOST=host, HTTP_AUTHORIZATION="Bearer the-callers")
    assert answer.status_code == 200 and b"the user's server" in body(answer)
    seen = standin.seen[-1]
    assert seen.path == "/lab?x=1"
    assert seen.headers["cookie"] == "_xsrf=kept"
    assert seen.headers["authorization"] == f"token {notebook_token(notebook)}"
    assert seen.headers["host"] == f"127.0.0.1:{standin.port}"
    assert "content-security-policy" not in {k.lower() for k in answer.headers}  # not a panel page


def test_a_server_cannot_set_the_content_cookie(
    owner_client: Client, notebook: Notebook, standin: StandIn
) -> None:
    browser, host = enter(owner_client, notebook)
    standin.set_cookie = "ajuste-content=planted; Path=/"
    answer = browser.get("/", HTTP_HOST=host)
    assert answer.status_code == 200 and "ajuste-content" not in answer.cookies
    standin.set_cookie = "_xsrf=2|x|y; Path=/"
    assert browser.get("/", HTTP_HOST=host).cookies["_xsrf"].value == "2|x|y"


def test_refusals_read_as_on_the_gateway(
    owner_client: Client, notebook: Notebook, standin: StandIn, outsider_client: Client
) -> None:
    host = f"nb-{notebook.pk.hex}.localhost:8000"
    anonymous = Client().get("/lab", HTTP_HOST=host)
    assert anonymous.status_code == 302
    assert anonymous["Location"].endswith(
        f"/usercontent/open/?host=nb-{notebook.pk.hex}&next=%2Flab"
    )
    assert outsider_client.get(f"/usercontent/open/?host=nb-{notebook.pk.hex}").status_code == 404
    browser, host = enter(owner_client, notebook)
    forged = browser.post("/api/contents", HTTP_HOST=host, HTTP_SEC_FETCH_SITE="cross-site")
    assert forged.status_code == 302
    unknown = Client().get("/", HTTP_HOST="nb-0123456789abcdef0123456789abcdef.localhost:8000")
    assert unknown.status_code == 403 and unknown.content == b"No such notebook.\n"
    Notebook.objects.filter(pk=notebook.pk).update(state=NotebookState.STOPPED)
    stopped = browser.get("/", HTTP_HOST=host)
    assert stopped.status_code == 403
    assert stopped.content == b"The notebook is not running: start it from the panel.\n"
    assert standin.seen == []


def test_the_auth_endpoint_answers_only_at_the_internal_address(
    owner_client: Client, notebook: Notebook, settings: Any
) -> None:
    browser, host = enter(owner_client, notebook)
    headers = {"HTTP_X_AJUSTE_HOST": host, "HTTP_X_ORIGINAL_URI": "/lab"}
    public = browser.get("/_ajuste/auth", HTTP_HOST="127.0.0.1:8000", **headers)
    assert public.status_code == 404 and "X-Ajuste-Authorization" not in public
    settings.KUBERNETES_PANEL_URL = f"http://{INTERNAL}"
    asked = browser.get("/_ajuste/auth", HTTP_HOST=INTERNAL, **headers)
    assert asked.status_code == 200
    assert asked["X-Ajuste-Authorization"] == f"token {notebook_token(notebook)}"
    assert asked["X-Ajuste-Upstream"] == urlsplit(notebook.url).netloc
    assert asked["X-Ajuste-Cookie"] == ""
    anonymous = Client().get("/_ajuste/auth", HTTP_HOST=INTERNAL, **headers)
    assert anonymous.status_code == 401 and "X-Ajuste-Authorization" not in anonymous
    assert anonymous["X-Ajuste-Signin"].endswith(f"?host=nb-{notebook.pk.hex}&next=%2Flab")
