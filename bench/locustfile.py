"""Locust users of the load benchmark (bench/bench_load.py starts locust with this file; not a
benchmark on its own). The benchmark writes the sessions, tokens and job ids it seeded to a JSON
file named by $AJUSTE_LOAD_CONFIG:

- `Browser`: a signed-in member (a session made beforehand) who browses their project's pages
  with 1-4 s of thought between them, and now and then follows a running job's log as the job
  page does (~10 s): the log poller and the status block each once a second, each asking the URL
  the page's poller holds (`?run=&after=`, `?v=`), answered 204 with no body while nothing
  changed; a poller stops once its answer no longer carries one.
- `Submitter`: an API client (a Bearer token) submitting a job every 3 s (wait included); the
  benchmark runs 30 of them (`fixed_count`), so 10 submissions per second in total as long as
  a submission answers within 3 s (a closed loop: slower answers lower the rate).

With streams (the benchmark's `--streams`: the config names the events server), a member's open
page holds its stream as static/js/streams.js does, and nothing polls: each `Browser` holds its
project's stream (`/p/<slug>/events/`) for the whole run, and a `changed` event there refreshes
the pushed block of the page it is on (the job, notebook or app list, the dashboard's numbers:
their `data-pushed` block's `hx-get`), once per event; following a running job opens the job's
stream (`<job>/events/?run=&after=`) for ~10 s, and its `state` events, and its progress
(`line` with `event`) or `changed` events at most once a second, refresh the status block.
Opening a stream is counted as a request (the time to its first event).

Every answer but the expected status is a failure (redirects are not followed: a lost session
would otherwise pass as the log-in page).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
from typing import Any

import gevent
import requests
from locust import FastHttpUser, between, constant_throughput, task

CONFIG: dict[str, Any] = json.loads(open(os.environ["AJUSTE_LOAD_CONFIG"]).read())  # noqa: SIM115
SESSIONS = itertools.cycle(CONFIG["sessions"])
TOKENS = itertools.cycle(CONFIG["tokens"])
HTMX = {"HX-Request": "true"}
STREAMS = CONFIG.get("streams") or ""  # the events server's URL; empty: the pages poll
PUSHED = re.compile(r'hx-get="([^"]+)"[^>]* data-pushed=')
POLLER = {
    name: re.compile(rf'id="{name}"[^>]* hx-get="([^"]+)"') for name in ("log-poller", "job-status")
}


def poll_url(html: str, element: str) -> str:
    """The URL an htmx poller (`#element`) of a page or fragment asks ("" once it stops)."""
    found = POLLER[element].search(html)
    return found.group(1).replace("&amp;", "&") if found else ""


def fetch(user: Browser, url: str, name: str, headers: dict[str, str] | None = None) -> str:
    """The answer's text ("" for a poll's 204: nothing new)."""
    with user.client.get(
        url,
        name=name,
        headers=user.cookie | (headers or {}),
        allow_redirects=False,
        catch_response=True,
    ) as response:
        # A poll's 204: nothing new, the poller asks the same again.
        if response.status_code != 200 and not (headers and response.status_code == 204):
            response.failure(f"{response.status_code} for {url}: {response.error or ''}")
            return ""
        response.success()
        return response.text or ""


def sse(response: requests.Response) -> Any:
    """(event, data) of a Server-Sent Events answer, as they come (heartbeats skipped)."""
    name, data = "message", ""
    for line in response.iter_lines(decode_unicode=True):
        if line == "":
            if data:
                yield name, json.loads(data)
            name, data = "message", ""
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()


def hold(user: Browser, url: str, name: str) -> requests.Response | None:
    """Open a stream at the events server (the member's session cookie, as the browser's
    EventSource sends it); counted as a request `name`, its time the wait for the headers."""
    started = time.perf_counter()
    error: Exception | None = None
    response = None
    try:
        response = requests.get(STREAMS + url, headers=user.cookie, stream=True, timeout=60)
        if response.status_code != 200:
            error = RuntimeError(f"{response.status_code} for {url}")
    except requests.RequestException as exc:
        error = exc
    user.environment.events.request.fire(
        request_type="SSE",
        name=name,
        response_time=(time.perf_counter() - started) * 1000,
        response_length=0,
        exception=error,
        context={},
    )
    return None if error else response


class Browser(FastHttpUser):
    wait_time = between(1, 4)

    def on_start(self) -> None:
        member = next(SESSIONS)
        self.cookie = {"Cookie": f"{CONFIG['cookie_name']}={member['cookie']}"}
        self.slug = member["project"]
        self.project = f"/p/{member['project']}"
        self.jobs: list[str] = member["jobs"]
        self.live: list[str] = member["live"]
        self.block = ""  # the pushed block of the page the member is on ("" for none)
        if STREAMS:
            self.follower = gevent.spawn(self.follow_project)

    def on_stop(self) -> None:
        if STREAMS:
            self.follower.kill(block=False)

    def follow_project(self) -> None:
        """The project's stream, held the whole run; a `changed` refreshes the page's block."""
        while True:
            response = hold(self, f"/p/{self.slug}/events/", "SSE: project stream opened")
            if response is None:
                gevent.sleep(3)  # the browser's retry
                continue
            try:
                for name, _ in sse(response):
                    if name == "changed" and self.block:
                        fetch(self, self.block, "pushed block refresh (htmx)", HTMX)
                    elif name == "end":
                        break
            except requests.RequestException:
                pass
            finally:
                response.close()

    def page(self, url: str, name: str) -> str:
        html = fetch(self, url, name)
        found = PUSHED.search(html)
        self.block = found.group(1).replace("&amp;", "&") if found else ""
        return html

    @task(4)
    def job_list(self) -> None:
        self.page(f"{self.project}/jobs/", "job list")

    @task(1)
    def job_list_page_2(self) -> None:
        self.page(f"{self.project}/jobs/?page=2", "job list")

    @task(3)
    def job_detail(self) -> None:
        self.page(f"{self.project}/jobs/{random.choice(self.jobs)}/", "job detail")

    @task(2)
    def buckets(self) -> None:
        self.page(f"{self.project}/buckets/", "bucket list")

    @task(2)
    def notebooks(self) -> None:
        self.page(f"{self.project}/notebooks/", "notebook list")

    @task(2)
    def dashboard(self) -> None:
        self.page(f"{self.project}/dashboard/", "project dashboard")

    @task(1)
    def home(self) -> None:
        self.page(f"{self.project}/", "project home")

    @task(3)
    def follow_log(self) -> None:
        """Open a running job's page and stay ~10 s while its log grows, polling as the page
        does: its log poller's and status block's URLs, each once a second; a 204 (nothing
        new) leaves the URL as it is, a 200 brings the next one."""
        page = f"{self.project}/jobs/{random.choice(self.live)}/"
        html = self.page(page, "job detail (running)")
        log_url, status_url = poll_url(html, "log-poller"), poll_url(html, "job-status")
        if STREAMS and log_url:
            return self.stream_log(log_url.replace("/logs/?", "/events/?"), status_url)
        until = time.monotonic() + 10
        while time.monotonic() < until and (log_url or status_url):
            time.sleep(1)
            if log_url:
                fragment = fetch(self, log_url, "log poll (htmx)", HTMX)
                log_url = poll_url(fragment, "log-poller") if fragment else log_url
            if status_url:
                fragment = fetch(self, status_url, "job status poll (htmx)", HTMX)
                status_url = poll_url(fragment, "job-status") if fragment else status_url

    def stream_log(self, events: str, status_url: str) -> None:
        """The job page with its stream open ~10 s: lines are appended as they come (no
        request); a state change, or progress at most once a second, refreshes the status."""
        response = hold(self, events, "SSE: job stream opened")
        if response is None:
            return
        refreshed = 0.0

        def read() -> None:
            nonlocal refreshed, status_url
            first = True
            for name, data in sse(response):
                now = time.monotonic()
                news = name == "state" and not first
                progress = (name == "changed" or (name == "line" and data.get("event"))) and (
                    now - refreshed >= 1
                )
                first = first and name != "state"
                if status_url and (news or progress):
                    refreshed = now
                    fragment = fetch(self, status_url, "job status refresh (htmx)", HTMX)
                    status_url = poll_url(fragment, "job-status") if fragment else status_url
                if name == "end":
                    return

        reader = gevent.spawn(read)
        reader.join(timeout=10)
        reader.kill()  # waits until it has left the read: closing under it is a reentrant call
        response.close()


class Submitter(FastHttpUser):
    fixed_count = 30
    wait_time = constant_throughput(1 / 3)

    def on_start(self) -> None:
        token = next(TOKENS)
        self.headers = {
            "Authorization": f"Bearer {token['token']}",
            "X-Ajuste-Project": token["project"],
        }
        self.count = 0

    @task
    def submit(self) -> None:
        self.count += 1
        body = {
            "name": f"load-{self.count}",
            "image": "registry.example.com/train:1",
            "command": ["python", "train.py"],
            "flavor": "h100-1-gpu",
            "gpu": 1,
        }
        with self.client.post(
            "/api/v1/jobs/",
            json=body,
            headers=self.headers,
            name="API: submit job",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                reason = response.error or (response.text or "")[:200]
                response.failure(f"{response.status_code}: {reason}")
            else:
                response.success()
