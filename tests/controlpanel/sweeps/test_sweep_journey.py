"""Issue 30's proof, on the local backend as `make run` runs it (real worker, beat and watcher
processes, the fine-tune entry point on the demo model, the S3 server), then in Chromium:

- an 8-trial grid over two parameters, 2 at a time, with the median pruner, finishes; at least
  2 trials are pruned with their reason; the sweep's cost is the sum of its trials' ledger
  lines exactly;
- the compare page draws 8 curves and sorts by final loss; "deploy the best" fills the app
  form with the best trial's model and adapter;
- lineage: one object of the data prefix changed and the fine-tune run again: the two adapters'
  digests differ and the adapters page names the key that changed."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from rest_framework.test import APIClient

from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.sweeps.models import Adapter, Sweep, Trial
from storage.objects import put_object
from tests.controlpanel.jobs.test_local_journey import upload_dir
from tests.controlpanel.sweeps.test_sweeps import ledger
from tests.fixtures.browser import browser_login
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import PASSWORD
from tests.fixtures.processes import Processes, wait_for
from training.demo import demo_conversations, make_demo_assets, write_jsonl

pytestmark = [
    pytest.mark.browser,
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.django_db(transaction=True),
]
# Grid order under seed 12: two good learning rates first, then poor ones the median rule
# can stop once the first two have finished (the ask order depends only on the seed).
SPACE = {"learning_rate": {"values": [1e-6, 1e-5, 5e-3, 1e-2]}, "rank": {"values": [4, 8]}}
TINY = {"max_steps": 12, "batch_size": 2, "max_length": 64, "log_steps": 1, "save_steps": 6}


@pytest.fixture
def sweep_processes(
    processes: Callable[[dict[str, str]], Processes], panel_s3: Any, local_jobs: Any, settings: Any
) -> Processes:
    """The local backend's worker, beat and watcher; sweeps advance every second."""
    settings.COMPUTE_BACKEND = "local"
    procs = processes(
        {
            "COMPUTE_BACKEND": "local",
            "AJUSTE_VAR_DIR": str(settings.VAR_DIR),
            "S3_ENDPOINT_URL": panel_s3.endpoint_url,
            "S3_ALIAS": "LOCAL",
            "S3_ACCESS_KEY": panel_s3.access_key,
            "S3_SECRET_KEY": panel_s3.secret_key,
            "SWEEP_TICK_SECONDS": "1",
        }
    )
    procs.worker()
    procs.beat()
    procs.watcher()
    return procs


def finished(sweep_id: str) -> Sweep | None:
    sweep = Sweep.objects.get(pk=sweep_id)
    return sweep if sweep.state != "RUNNING" else None


def test_a_sweep_end_to_end(
    page: Any,
    live_server: Any,
    sweep_processes: Processes,
    owner: Any,
    owner_api: APIClient,
    project: Project,
    panel_s3: Any,
    tmp_path: Path,
) -> None:
    assets = make_demo_assets(tmp_path / "demo", examples=24)
    # Buckets of its own: the S3 server lives for the session, and test_browser_jobs (before
    # this test in the slow tier) already made "models" and "results" on it.
    models = project_bucket(project, panel_s3).name
    out = project_bucket(project, panel_s3).name
    upload_dir(panel_s3, models, "tiny-llama", assets.model_dir)
    upload_dir(panel_s3, models, "chat", assets.data_file.parent)
    base = {
        "preset": "finetune",
        "flavor": "ai1-1-cpu",
        "volumes": [
            f"{models}@LOCAL/tiny-llama:/workspace/model",
            f"{models}@LOCAL/chat:/workspace/data",
            f"{out}@LOCAL/sweep:/workspace/output:rw",
        ],
        "params": TINY,
    }
    body = {
        "name": "lr-rank",
        "base": base,
        "space": SPACE,
        "sampler": "grid",
        "pruner": "median",
        "max_trials": 8,
        "parallel": 2,
        "seed": 12,
    }
    created = owner_api.post("/api/v1/sweeps/?project=alpha", body, format="json")
    assert created.status_code == 201, created.content
    sweep_id = created.json()["id"]
    sweep = wait_for(lambda: finished(sweep_id), 1500, "the sweep to finish", sweep_processes)
    assert sweep.state == "DONE", sweep.state_reason

    trials = list(Trial.objects.filter(sweep=sweep).order_by("number"))
    assert len(trials) == 8
    pruned = [t for t in trials if t.state == "PRUNED"]
    assert len(pruned) >= 2, [(t.number, t.state, t.reason) for t in trials]
    for trial in pruned:
        assert re.fullmatch(r"pruned by the median rule at step \d+", trial.reason)
        job = Job.objects.get(pk=trial.job_id)
        assert job.state == "INTERRUPTED"
        assert trial.reason in set(job.events.values_list("reason", flat=True))
    jobs = [Job.objects.get(pk=t.job_id) for t in trials]
    api = owner_api.get(f"/api/v1/sweeps/{sweep_id}/?project=alpha").json()
    wait_for(
        lambda: (
            owner_api.get(f"/api/v1/sweeps/{sweep_id}/?project=alpha").json()["cost"]
            == str(ledger(jobs))
        ),
        60,
        "the ledger to record every run",
    )
    api = owner_api.get(f"/api/v1/sweeps/{sweep_id}/?project=alpha").json()
    assert api["cost"] == str(ledger(jobs)) and ledger(jobs) > 0
    best = api["best"]
    assert best is not None and best["state"] == "COMPLETE"

    # The compare page: 8 curves, sorted by final loss both ways.
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/compare/?sweep={sweep_id}")
    expect(page.locator("#compare-curves")).to_have_attribute("data-curves", "8")
    losses = [_loss(t) for t in page.locator("[data-testid=final-loss]").all_inner_texts()]
    known = [x for x in losses if x is not None]
    assert known == sorted(known) and len(losses) == 8
    page.click("[data-testid=sort-final-loss]")
    page.wait_for_url("**sort=-final_loss**")
    losses = [_loss(t) for t in page.locator("[data-testid=final-loss]").all_inner_texts()]
    known = [x for x in losses if x is not None]
    assert known == sorted(known, reverse=True)

    # Deploy the best: the app form, filled with its model and adapter.
    page.click("[data-testid=deploy-best]")
    page.wait_for_url("**/apps/new/?from_job=*")
    best_job = Job.objects.get(pk=best["job"])
    output = next(v for v in best_job.volumes if v.endswith(":/workspace/output:rw"))
    assert page.input_value("#id_adapter") == output.rsplit(":", 2)[0] + "/adapter"
    assert page.input_value("#id_model") == f"{models}@LOCAL/tiny-llama"

    # Lineage: one object of the data prefix changed, the best trial's spec run again.
    first = wait_for(
        lambda: Adapter.objects.filter(job=best_job).first(), 60, "the best trial's adapter"
    )
    changed = write_jsonl(tmp_path / "train.jsonl", demo_conversations(24, 7))
    put_object(panel_s3, bucket=models, key="chat/train.jsonl", data=changed.read_bytes())
    again = dict(base, name="again", params=TINY | best_job.params)
    again["volumes"] = [*base["volumes"][:2], f"{out}@LOCAL/again:/workspace/output:rw"]
    response = owner_api.post("/api/v1/jobs/?project=alpha", again, format="json")
    assert response.status_code == 201, response.content
    second = wait_for(
        lambda: Adapter.objects.filter(job_id=response.json()["id"]).first(),
        600,
        "the second adapter",
        sweep_processes,
    )
    assert first.data_digest and second.data_digest and first.data_digest != second.data_digest
    page.goto(f"{live_server.url}/p/alpha/adapters/?a={first.pk}&b={second.pk}")
    expect(page.locator("[data-testid=key-changed]")).to_have_text("changed: chat/train.jsonl")
    assert page.locator("[data-testid=key-added]").count() == 0


def _loss(text: str) -> float | None:
    return None if text.strip() == "—" else float(text)
