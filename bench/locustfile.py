"""Locust users of the load benchmark (bench/bench_load.py starts locust with this file; not a
benchmark on its own). The benchmark writes the sessions, tokens and job ids it seeded to a JSON
file named by $AJUSTE_LOAD_CONFIG:

- `Browser`: a signed-in member (a session made beforehand) who browses their project's pages
  with 1-4 s of thought between them, and now and then follows a running job's log as the job
  page does (the log poller 500 ms after each answer, the status block every second, ~10 s).
- `Submitter`: an API client (a Bearer token) submitting a job every 3 s (wait included); the
  benchmark runs 30 of them (`fixed_count`), so 10 submissions per second in total as long as
  a submission answers within 3 s (a closed loop: slower answers lower the rate).

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

from locust import FastHttpUser, between, constant_throughput, task

CONFIG: dict[str, Any] = json.loads(open(os.environ["AJUSTE_LOAD_CONFIG"]).read())  # noqa: SIM115
SESSIONS = itertools.cycle(CONFIG["sessions"])
TOKENS = itertools.cycle(CONFIG["tokens"])
AFTER = re.compile(r'data-after="(\d+)"')
HTMX = {"HX-Request": "true"}


def fetch(user: Browser, url: str, name: str, headers: dict[str, str] | None = None) -> str:
    with user.client.get(
        url,
        name=name,
        headers=user.cookie | (headers or {}),
        allow_redirects=False,
        catch_response=True,
    ) as response:
        if response.status_code != 200:
            response.failure(f"{response.status_code} for {url}: {response.error or ''}")
            return ""
        response.success()
        return response.text or ""


class Browser(FastHttpUser):
    wait_time = between(1, 4)

    def on_start(self) -> None:
        member = next(SESSIONS)
        self.cookie = {"Cookie": f"{CONFIG['cookie_name']}={member['cookie']}"}
        self.project = f"/p/{member['project']}"
        self.jobs: list[str] = member["jobs"]
        self.live: list[str] = member["live"]

    @task(4)
    def job_list(self) -> None:
        fetch(self, f"{self.project}/jobs/", "job list")

    @task(1)
    def job_list_page_2(self) -> None:
        fetch(self, f"{self.project}/jobs/?page=2", "job list")

    @task(3)
    def job_detail(self) -> None:
        fetch(self, f"{self.project}/jobs/{random.choice(self.jobs)}/", "job detail")

    @task(2)
    def buckets(self) -> None:
        fetch(self, f"{self.project}/buckets/", "bucket list")

    @task(2)
    def notebooks(self) -> None:
        fetch(self, f"{self.project}/notebooks/", "notebook list")

    @task(2)
    def dashboard(self) -> None:
        fetch(self, f"{self.project}/dashboard/", "project dashboard")

    @task(1)
    def home(self) -> None:
        fetch(self, f"{self.project}/", "project home")

    @task(3)
    def follow_log(self) -> None:
        """Open a running job's page and stay ~10 s while its log grows."""
        page = f"{self.project}/jobs/{random.choice(self.live)}/"
        html = fetch(self, page, "job detail (running)")
        found = AFTER.search(html)
        after = int(found.group(1)) if found else 0
        next_status = time.monotonic() + 1
        until = time.monotonic() + 10
        while time.monotonic() < until:
            time.sleep(0.5)
            fragment = fetch(self, f"{page}logs/?after={after}", "log poll (htmx)", HTMX)
            found = AFTER.search(fragment)
            after = int(found.group(1)) if found else after
            if time.monotonic() >= next_status:
                fetch(self, f"{page}status/", "job status poll (htmx)", HTMX)
                next_status += 1


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
