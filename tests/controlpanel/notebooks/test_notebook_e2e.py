"""Issue #13 end to end, in Chromium: the owner creates a CPU notebook with a project bucket at
/workspace/data through the form, the local backend runs a real JupyterLab (real worker, beat
and watcher processes), "Open" takes the browser to it with its token, the lab lists the
bucket's file and saves one; stopped and started from the panel, the notebook answers at the
same address with the file still there. A member of another project gets 404 on its Open."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from controlpanel.engine.backend import job_ref
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Project
from storage.objects import put_object
from tests.fixtures.browser import browser_login
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import PASSWORD

# Jupyter's REST API from the lab's own page, authenticated by the token its URL carried alone
# (not the login cookie the lab set for the tab).
LIST = """async ([url, token]) => {
  const answer = await fetch(url, {
    headers: {Authorization: `token ${token}`}, credentials: "omit",
  });
  return {status: answer.status, body: answer.ok ? await answer.json() : null};
}"""
PUT_TEXT = """async ([url, token, text]) => {
  const answer = await fetch(url, {
    method: "PUT",
    credentials: "omit",
    headers: {Authorization: `token ${token}`, "Content-Type": "application/json"},
    body: JSON.stringify({type: "file", format: "text", content: text}),
  });
  return answer.status;
}"""


def open_lab(page: Any, sent: list[str]) -> tuple[Any, str, str]:
    """Click Open (a new tab): the tab, the lab's base URL, and the token the panel's redirect
    carried (`sent`: the tabs' navigations with a token, in order)."""
    before = len(sent)
    with page.context.expect_page() as opened:
        page.click("[data-testid=open]")
    lab = opened.value
    lab.wait_for_load_state("domcontentloaded")
    parts = urlsplit(sent[before])  # the panel's redirect; the lab then goes on to lab?token=
    token = dict(p.split("=", 1) for p in parts.query.split("&"))["token"]
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    assert lab.url.startswith(base) and "/lab" in lab.url, lab.url  # JupyterLab's own page
    return lab, base, token


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
) -> None:
    bucket = project_bucket(project, panel_s3, "nb-data").name
    put_object(panel_s3, bucket=bucket, key="data/hello.txt", data=b"hello from the bucket")
    procs = local_processes
    notebook: Notebook | None = None
    sent: list[str] = []
    page.context.on(
        "request",
        lambda r: sent.append(r.url) if r.is_navigation_request() and "token=" in r.url else None,
    )
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

        lab, base, token = open_lab(page, sent)
        listing = lab.evaluate(LIST, [f"{base}api/contents/data", token])
        assert listing["status"] == 200, (listing, procs.logs()[-3000:])
        assert [item["name"] for item in listing["body"]["content"]] == ["hello.txt"]
        assert lab.evaluate(PUT_TEXT, [f"{base}api/contents/notes.txt", token, "kept"]) == 201
        lab.close()
        notebook.refresh_from_db()
        first_url = notebook.url
        assert first_url and token in first_url

        page.click("#notebook-status button:text-is('Stop')")
        expect(state).to_have_text("STOPPED", timeout=30_000)
        page.click("#notebook-status button:text-is('Start')")
        expect(state).to_have_text("RUNNING", timeout=60_000)
        notebook.refresh_from_db()
        assert notebook.url is not None and notebook.run == 2
        # The same address; the token is derived per start (notebook_auth.notebook_token), so
        # the URL's query changes and the last start's token opens nothing any more.
        assert urlsplit(notebook.url)[:3] == urlsplit(first_url)[:3]

        lab, again, token_again = open_lab(page, sent)
        assert again == base and token_again in notebook.url
        notes = lab.evaluate(LIST, [f"{base}api/contents/notes.txt?content=1", token_again])
        assert notes["status"] == 200 and notes["body"]["content"] == "kept", notes
        data = lab.evaluate(LIST, [f"{base}api/contents/data", token_again])
        assert [item["name"] for item in data["body"]["content"]] == ["hello.txt"]
        assert token_again != token
        stale = lab.evaluate(LIST, [f"{base}api/contents/notes.txt", token])
        assert stale["status"] in (401, 403), stale
        lab.close()

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
