"""Issue #13 end to end, in Chromium: the owner creates a CPU notebook with a project bucket at
/workspace/data through the form, the local backend runs a real JupyterLab (real worker, beat
and watcher processes), "Open" takes the browser to it on the notebook's own host
(`nb-<id>.localhost:<port>`, the panel's proxy under make run, issue 25) through a one-time
ticket, never with the server's token; the lab lists the bucket's file and saves one; stopped
and started from the panel, the notebook answers at the same address with the file still there.
A member of another project gets 404 on its Open."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect

from controlpanel.engine.backend import job_ref
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Project
from controlpanel.usercontent.domain import parse_content_domain
from storage.objects import put_object
from tests.fixtures.browser import browser_login
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import PASSWORD

# Jupyter's REST API from the lab's own page, with the cookie its host set at the ticket's
# exchange (the gate's; the proxy gives the server its own token, which the browser never holds).
LIST = """async (url) => {
  const answer = await fetch(url, {credentials: "same-origin"});
  return {status: answer.status, body: answer.ok ? await answer.json() : null};
}"""
PUT_TEXT = """async ([url, text]) => {
  const answer = await fetch(url, {
    method: "PUT",
    credentials: "same-origin",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({type: "file", format: "text", content: text}),
  });
  return answer.status;
}"""


def open_lab(page: Any, notebook: Notebook, port: int | None) -> tuple[Any, str]:
    """Click Open (a new tab): the tab, on JupyterLab's own page at the notebook's own host,
    and that host's root URL."""
    with page.context.expect_page() as opened:
        page.click("[data-testid=open]")
    lab = opened.value
    lab.wait_for_load_state("domcontentloaded")
    base = f"http://nb-{notebook.pk.hex}.localhost:{port}/"
    lab.wait_for_url(f"{base}**/lab**")  # the ticket's exchange, then the lab
    return lab, base


def server_token(notebook: Notebook) -> str:
    """The token the notebook's server was started with, as its row keeps it."""
    query = urlsplit(notebook.url or "").query
    return dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("token", "")


@pytest.mark.browser
@pytest.mark.e2e
@pytest.mark.slow
def test_a_notebook_opens_lists_its_bucket_and_keeps_its_files_across_stop_and_start(
    page: Any,
    browser: Any,
    live_server: Any,
    local_processes: Any,
    owner: Any,
    outsider: Any,
    project: Project,
    panel_s3: Any,
    local_jobs: Any,
    settings: Any,
) -> None:
    port = urlsplit(live_server.url).port
    settings.SITE_URL = live_server.url  # make run's content domain: localhost:<its port>
    settings.USER_CONTENT_DOMAIN = parse_content_domain(f"localhost:{port}")
    bucket = project_bucket(project, panel_s3, "nb-data").name
    put_object(panel_s3, bucket=bucket, key="data/hello.txt", data=b"hello from the bucket")
    procs = local_processes
    notebook: Notebook | None = None
    sent: list[str] = []  # every URL the browser asked for, in every tab
    page.context.on("request", lambda r: sent.append(r.url))
    page.on("dialog", lambda dialog: dialog.accept())  # Stop asks first
    try:
        browser_login(page, live_server.url, "owner", PASSWORD)
        page.goto(f"{live_server.url}/p/alpha/notebooks/new/")
        page.fill("#id_name", "explore")
        page.select_option("#id_flavor", "ai1-1-cpu")
        page.fill("#id_volumes", f"{bucket}@LOCAL/data:/workspace/data")
        page.click("#notebook-form button[type=submit]")
        page.wait_for_url("**/notebooks/*-*/")
        notebook = Notebook.objects.get(name="explore")
        state = page.locator("[data-testid=notebook-state]")
        expect(state).to_have_text("RUNNING", timeout=60_000)

        lab, base = open_lab(page, notebook, port)
        listing = lab.evaluate(LIST, f"{base}api/contents/data")
        assert listing["status"] == 200, (listing, procs.logs()[-3000:])
        assert [item["name"] for item in listing["body"]["content"]] == ["hello.txt"]
        assert lab.evaluate(PUT_TEXT, [f"{base}api/contents/notes.txt", "kept"]) == 201
        lab.close()
        notebook.refresh_from_db()
        first_url, token = notebook.url, server_token(notebook)
        assert first_url and token

        page.click("#notebook-status button:text-is('Stop')")
        expect(state).to_have_text("STOPPED", timeout=30_000)
        page.click("#notebook-status button:text-is('Start')")
        expect(state).to_have_text("RUNNING", timeout=60_000)
        notebook.refresh_from_db()
        assert notebook.url is not None and notebook.run == 2
        # The same address; the token is derived per start (notebook_auth.notebook_token), so
        # the URL's query changes and the last start's token opens nothing any more.
        assert urlsplit(notebook.url)[:3] == urlsplit(first_url)[:3]

        lab, again = open_lab(page, notebook, port)
        assert again == base
        notes = lab.evaluate(LIST, f"{base}api/contents/notes.txt?content=1")
        assert notes["status"] == 200 and notes["body"]["content"] == "kept", notes
        data = lab.evaluate(LIST, f"{base}api/contents/data")
        assert [item["name"] for item in data["body"]["content"]] == ["hello.txt"]
        token_again = server_token(notebook)
        assert token_again and token_again != token
        lab.close()
        # The token is derived per start (notebook_auth.notebook_token): at the server itself,
        # this start's opens the file and the last start's nothing any more.
        parts = urlsplit(notebook.url)
        notes_at_server = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        notes_at_server = notes_at_server.removesuffix("/lab") + "/api/contents/notes.txt"
        for held, status in ((token_again, {200}), (token, {401, 403})):
            answer = httpx.get(notes_at_server, headers={"Authorization": f"token {held}"})
            assert answer.status_code in status, (notes_at_server, answer.status_code)
        # The servers' tokens never reached the browser: no URL it asked for carried one.
        assert sent and not [url for url in sent if token in url or token_again in url]

        # Another project's member: the Open of this notebook is not found, under either slug.
        stranger = browser.new_context()
        try:
            tab = stranger.new_page()
            browser_login(tab, live_server.url, "outsider", PASSWORD)
            tab.wait_for_url(f"{live_server.url}/**")
            for slug in ("alpha", "beta"):
                answer = tab.goto(f"{live_server.url}/p/{slug}/notebooks/{notebook.pk}/open/")
                assert answer is not None and answer.status == 404, slug
                assert token not in tab.content()
        finally:
            stranger.close()
    finally:
        if notebook is not None:
            local_jobs.delete_notebook(ref=job_ref(notebook))
