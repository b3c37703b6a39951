"""The attack of issue 25 in Chromium, through the panel as `make run` serves it (gunicorn, the
local backend): a notebook's server must never receive the panel's cookies, and a public app's
page must never run on the panel's origin, where its script could read anything its visitor
(a site admin) may. Both follow the product's own links: the notebook page's Open, the URL the
app's page shows. A stand-in server plays the notebook and the app and records what reaches it.

Before user content had origins of its own, Open led to the editor's loopback port, where
Chromium sent it the panel's `sessionid` and `csrftoken` (cookies ignore ports), and an app was
served under the panel's own `/a/...`, where its script read the admin's projects from the API.
"""

from __future__ import annotations

import socket
import sys
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from tests.controlpanel.usercontent.standin import StandIn
from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD
from tests.fixtures.processes import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

STEAL = """(async () => {
  const out = [];
  for (const url of ["/api/v1/projects/", "%(panel)s/api/v1/projects/"]) {
    try {
      const answer = await fetch(url, {credentials: "include"});
      out.push(url + " " + answer.status + " " + (await answer.text()).slice(0, 3000));
    } catch (error) {
      out.push(url + " refused");
    }
  }
  document.body.setAttribute("data-loot", out.join("\\n"));
  document.title = "done";
})();
"""
ECHO = """async (path) => {
  const socket = new WebSocket(`ws://${location.host}${path}`);
  return await new Promise((resolve) => {
    socket.onopen = () => socket.send("ping from the page");
    socket.onmessage = (event) => { resolve(event.data); socket.close(); };
    socket.onerror = () => resolve("error");
  });
}"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def panel(processes: Any, transactional_db: Any) -> str:
    """The panel as `make run` serves it: gunicorn on 127.0.0.1, the local backend."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = processes({"SITE_URL": url, "COMPUTE_BACKEND": "local", "WEB_THREADS": "8"})
    procs.start(
        "web",
        sys.executable,
        "-m",
        "gunicorn",
        "controlpanel.wsgi:application",
        f"--bind=127.0.0.1:{port}",
        "--workers=1",
        "--threads=8",
    )

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 60, "the panel's gunicorn", procs)
    return url


def test_a_notebook_server_never_receives_the_panels_cookies(
    browser: Any, panel: str, standin: StandIn, project: Project, owner: Any
) -> None:
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="local",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.RUNNING,
    )
    # What the local backend records for a running JupyterLab: its loopback URL and token.
    Notebook.objects.filter(pk=notebook.pk).update(url=f"http://127.0.0.1:{standin.port}/?token=t")
    context = browser.new_context()
    page = context.new_page()
    login(page, panel, owner)
    page.goto(f"{panel}/p/{project.slug}/notebooks/{notebook.pk}/")
    assert {c["name"] for c in context.cookies()} >= {"sessionid", "csrftoken"}
    with context.expect_page() as opened:
        page.click("[data-testid=open]")
    editor = opened.value
    editor.wait_for_load_state("domcontentloaded")
    assert "the user's server" in editor.content()
    reached = [c for c in standin.cookies_seen() if c in ("sessionid", "csrftoken")]
    assert reached == [], f"the notebook's server received the panel's cookies {reached}"
    assert urlsplit(editor.url).netloc == f"nb-{notebook.pk.hex}.localhost:{urlsplit(panel).port}"
    assert "ajuste-content" not in standin.cookies_seen()  # the host's own cookie stays too
    assert standin.seen[-1].headers.get("authorization") == f"token {notebook_token_of(notebook)}"
    assert editor.evaluate(ECHO, "/api/kernels/k/channels") == "ping from the page"
    context.close()


def login(page: Any, panel: str, user: Any) -> None:
    """Signs in at the gunicorn panel, whose password hashers are the real ones (the tests'
    fast hasher is this process's only)."""
    hashed = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt())
    type(user).objects.filter(pk=user.pk).update(password=hashed)
    browser_login(page, panel, user.username, PASSWORD)
    page.wait_for_url(lambda url: "/login/" not in url)


def notebook_token_of(notebook: Notebook) -> str:
    from controlpanel.notebooks.auth import notebook_token

    return notebook_token(Notebook.objects.get(pk=notebook.pk))


def test_a_public_apps_page_cannot_read_the_panel_as_its_visitor(
    browser: Any, panel: str, standin: StandIn, project: Project, owner: Any, admin_user: Any
) -> None:
    app = App.objects.create(
        project=project,
        owner=owner,
        name="chat",
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat", "public": True},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        state=AppState.RUNNING,
        url=f"http://127.0.0.1:{standin.port}",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    standin.page = b'<!doctype html><title>app</title><body><script src="steal.js"></script>'
    standin.files["steal.js"] = ((STEAL % {"panel": panel}).encode(), "text/javascript")
    context = browser.new_context()
    page = context.new_page()
    login(page, panel, admin_user)
    page.goto(f"{panel}/p/{project.slug}/apps/{app.pk}/")
    address = page.inner_text("[data-testid=app-url]").strip()
    page.goto(address)  # one link, followed by a site admin
    page.wait_for_selector("body[data-loot]", state="attached")
    loot = page.get_attribute("body", "data-loot") or ""
    assert '"alpha"' not in loot, f"the app's script read the panel as its visitor:\n{loot}"
    assert urlsplit(page.url).hostname == f"app-{app.pk.hex}.localhost"
    reached = [c for c in standin.cookies_seen() if c in ("sessionid", "csrftoken")]
    assert reached == [], f"the app's server received the panel's cookies {reached}"
    context.close()
