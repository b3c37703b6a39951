"""Sweeps through the API and the driver's step, on the real database: the contract's keyed
errors, trials launched up to `parallel` and never twice, pruning by the median rule with its
reason on the job, the budget, and the cost as the sum of the trials' ledger lines."""

from __future__ import annotations

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from django.db.models import F, Sum
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.billing.models import Line
from controlpanel.buckets.models import Bucket
from controlpanel.engine import curves
from controlpanel.engine.lifecycle import record_state
from controlpanel.engine.models import JobRun
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.sweeps import services, tasks
from controlpanel.sweeps.models import Sweep, Trial
from tests.fixtures.panel import api_client_for

BUCKET = "alpha-data"


@pytest.fixture
def bucket(project: Project, panel_s3: Any) -> str:
    Bucket.objects.get_or_create(project=project, datastore="LOCAL", name=BUCKET)
    return BUCKET


def sweep_body(**changes: Any) -> dict[str, Any]:
    body = {
        "name": "lr-rank",
        "base": {
            "preset": "finetune",
            "flavor": "ai1-1-cpu",
            "volumes": [
                f"{BUCKET}@LOCAL/chat:/workspace/data",
                f"{BUCKET}@LOCAL/runs/s1:/workspace/output:rw",
            ],
            "params": {"base_model": "org/tiny", "max_steps": 10},
        },
        "space": {"learning_rate": {"values": [1e-6, 1e-3]}, "rank": {"values": [4, 8]}},
        "sampler": "grid",
        "pruner": "median",
        "max_trials": 4,
        "parallel": 2,
    }
    return body | changes


def create(api: APIClient, **changes: Any) -> dict[str, Any]:
    response = api.post("/api/v1/sweeps/?project=alpha", sweep_body(**changes), format="json")
    assert response.status_code == 201, response.content
    return response.json()  # type: ignore[no-any-return]


def advance(sweep_id: str) -> Sweep:
    tasks.sweep_advance(sweep_id)
    return Sweep.objects.get(pk=sweep_id)


def run_job(job: Job, losses: list[float], *, end: str | None = None) -> None:
    """The job ran (RUNNING, a billed run) and reported these losses at steps 1, 2, ..."""
    job.refresh_from_db()
    curves.replace(job, [[step, loss, 100.0, 1e-4] for step, loss in enumerate(losses, start=1)])
    start = timezone.now() - timedelta(minutes=3)
    JobRun.objects.update_or_create(
        uid=f"run-{job.pk}",
        defaults={
            "job": job,
            "project": job.project,
            "run": job.run,
            "flavor": job.flavor,
            "units": 1,
            "started_at": start,
            "finished_at": timezone.now() if end else None,
        },
    )
    job.launched_run = job.run
    job.save(update_fields=["launched_run"])
    record_state(job, "RUNNING", "running")
    if end:
        record_state(job, end, "exit code 0")


def trial_jobs(sweep_id: str) -> list[Job]:
    trials = Trial.objects.filter(sweep_id=sweep_id).order_by("number")
    return [Job.objects.get(pk=t.job_id) for t in trials]


def test_the_contract_says_what_is_wrong_under_stable_keys(
    owner_api: APIClient, bucket: str
) -> None:
    bad = sweep_body(
        sampler="annealing",
        pruner="hyperband",
        max_trials=0,
        space={"learning_rate": {"low": 1, "high": 0}, "colour": {"values": ["red"]}},
    )
    response = owner_api.post("/api/v1/sweeps/?project=alpha", bad, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) >= {
        "sampler",
        "pruner",
        "max_trials",
        "space.learning_rate",
        "space.colour",
    }
    assert Sweep.objects.count() == 0 and Job.objects.count() == 0
    grid = owner_api.post(
        "/api/v1/sweeps/?project=alpha", sweep_body(max_trials=5), format="json"
    ).json()
    assert grid == {"max_trials": ["The grid has 4 points: at most 4 trials."]}
    base = sweep_body()
    base["base"] = base["base"] | {"volumes": [f"{BUCKET}@LOCAL/chat:/workspace/data"]}
    no_output = owner_api.post("/api/v1/sweeps/?project=alpha", base, format="json").json()
    assert "/workspace/output" in no_output["base.volumes"][0]
    elsewhere = sweep_body()
    elsewhere["base"]["volumes"] = [
        "someone-elses@LOCAL/chat:/workspace/data",
        f"{BUCKET}@LOCAL/runs:/workspace/output:rw",
    ]
    refused = owner_api.post("/api/v1/sweeps/?project=alpha", elsewhere, format="json").json()
    assert any(key.startswith("base.volumes") for key in refused), refused
    assert Sweep.objects.count() == 0 and Job.objects.count() == 0


def test_trials_are_ordinary_jobs_launched_up_to_parallel_and_never_twice(
    owner_api: APIClient, owner: Any, bucket: str
) -> None:
    sweep = create(owner_api)
    advance(sweep["id"])
    advance(sweep["id"])  # a duplicate or retried task
    jobs = trial_jobs(sweep["id"])
    assert len(jobs) == 2
    assert [j.name for j in jobs] == ["lr-rank #0", "lr-rank #1"]
    assert all(j.owner == owner and j.preset == "finetune" for j in jobs)
    outputs = [v for j in jobs for v in j.volumes if v.endswith(":/workspace/output:rw")]
    assert outputs == [
        f"{BUCKET}@LOCAL/runs/s1/trial-000:/workspace/output:rw",
        f"{BUCKET}@LOCAL/runs/s1/trial-001:/workspace/output:rw",
    ]
    params = [(j.params["learning_rate"], j.params["rank"]) for j in jobs]
    assert len(set(params)) == 2 and jobs[0].params["max_steps"] == 10
    # A claimed sweep is left alone: the second worker makes nothing.
    Sweep.objects.filter(pk=sweep["id"]).update(claimed_until=timezone.now() + timedelta(minutes=1))
    run_job(jobs[0], [6.0, 5.0], end="DONE")
    advance(sweep["id"])
    assert Trial.objects.filter(sweep_id=sweep["id"]).count() == 2


def test_a_poor_trial_is_pruned_by_the_median_rule_with_its_reason(
    owner_api: APIClient, bucket: str
) -> None:
    sweep = create(owner_api)
    advance(sweep["id"])
    first, second = trial_jobs(sweep["id"])
    run_job(first, [6.1, 5.6, 5.2, 5.0], end="DONE")
    run_job(second, [6.1, 5.7, 5.3, 5.1], end="DONE")
    advance(sweep["id"])
    third, fourth = trial_jobs(sweep["id"])[2:]
    run_job(third, [6.1, 6.1, 6.1])  # worse than both finished trials at step 3
    run_job(fourth, [6.1, 5.5, 5.1])  # better: goes on
    state = advance(sweep["id"])
    trial = Trial.objects.get(job=third)
    assert (trial.state, trial.pruned_step) == ("PRUNED", 3)
    assert trial.reason == "pruned by the median rule at step 3"
    third.refresh_from_db()
    assert third.state == "INTERRUPTING" and third.state_reason == trial.reason
    assert Trial.objects.get(job=fourth).state == "RUNNING"
    assert state.state == "RUNNING"
    api = owner_api.get(f"/api/v1/sweeps/{sweep['id']}/?project=alpha").json()
    assert [t["state"] for t in api["trials"]] == ["COMPLETE", "COMPLETE", "PRUNED", "RUNNING"]
    assert api["best"]["number"] == 0 and api["best"]["final_loss"] == 5.0

    record_state(third, "INTERRUPTED", "exit code 143")
    run_job(fourth, [6.1, 5.5, 5.1, 4.9], end="DONE")
    done = advance(sweep["id"])
    assert done.state == "DONE", done.state_reason
    assert "2 complete" not in done.state_reason and "1 pruned" in done.state_reason
    assert "best: trial 3, loss 4.9000" in done.state_reason


def ledger(jobs: list[Job]) -> Decimal:
    """Σ of each job's ledger lines, in money, as the job pages round them."""
    total = Decimal(0)
    for job in jobs:
        lines = Line.objects.filter(run__job=job).aggregate(
            p=Sum(F("minutes") * F("units") * F("price_per_hour"))
        )
        total += (Decimal(lines["p"] or 0) / 60).quantize(Decimal("0.0001"), ROUND_HALF_UP)
    return total


def test_the_cost_is_the_sum_of_the_trials_ledger_and_the_budget_stops_launching(
    owner_api: APIClient, bucket: str
) -> None:
    sweep = create(owner_api, max_cost="0.01", sampler="random", max_trials=6)
    advance(sweep["id"])
    jobs = trial_jobs(sweep["id"])
    for job in jobs:
        run_job(job, [6.0, 5.5], end="DONE")
    state = advance(sweep["id"])
    api = owner_api.get(f"/api/v1/sweeps/{sweep['id']}/?project=alpha").json()
    assert Decimal(api["cost"]) == ledger(jobs) > 0
    assert sum(Decimal(t["cost"] or 0) for t in api["trials"]) == Decimal(api["cost"])
    # 2 trials of 3 minutes at 0.04/h: 0.004, under 0.01: more trials launch.
    assert state.state == "RUNNING" and len(trial_jobs(sweep["id"])) == 4
    for job in trial_jobs(sweep["id"])[2:]:
        run_job(job, [6.0, 5.4], end="DONE")
    for job in trial_jobs(sweep["id"]):
        JobRun.objects.filter(job=job).update(started_at=F("started_at") - timedelta(minutes=5))
        JobRun.objects.get(job=job).save()  # the ledger records the longer run
    done = advance(sweep["id"])
    assert done.state == "DONE" and "the budget of 0.01 was reached" in done.state_reason
    assert len(trial_jobs(sweep["id"])) == 4
    final = owner_api.get(f"/api/v1/sweeps/{sweep['id']}/?project=alpha").json()
    assert Decimal(final["cost"]) == ledger(trial_jobs(sweep["id"]))


def test_stop_ends_the_running_trials_and_launches_nothing_more(
    owner_api: APIClient, member: Any, bucket: str
) -> None:
    sweep = create(owner_api)
    member_api = api_client_for(member)
    advance(sweep["id"])
    refused = member_api.post(f"/api/v1/sweeps/{sweep['id']}/stop/?project=alpha")
    assert refused.status_code == 403
    stopped = owner_api.post(f"/api/v1/sweeps/{sweep['id']}/stop/?project=alpha").json()
    assert stopped["state"] == "STOPPED" and stopped["state_reason"] == "stopped by owner"
    assert {t["state"] for t in stopped["trials"]} == {"FAILED"}
    for job in trial_jobs(sweep["id"]):
        assert job.state == "INTERRUPTED"  # never launched: stopped before it started
    advance(sweep["id"])
    assert len(trial_jobs(sweep["id"])) == 2
    again = owner_api.post(f"/api/v1/sweeps/{sweep['id']}/stop/?project=alpha")
    assert again.status_code == 400


def test_the_sweep_pages_show_the_trials_and_the_best(
    owner_api: APIClient, owner_client: Any, bucket: str
) -> None:
    sweep = create(owner_api)
    advance(sweep["id"])
    first, second = trial_jobs(sweep["id"])
    run_job(first, [6.0, 5.0], end="DONE")
    run_job(second, [6.0, 5.5], end="DONE")
    advance(sweep["id"])
    page = owner_client.get(f"/p/alpha/sweeps/{sweep['id']}/").content.decode()
    assert "lr-rank #0" in page and "5.0000" in page
    assert f"/p/alpha/apps/new/?from_job={first.pk}" in page  # deploy the best
    compare = owner_client.get(f"/p/alpha/compare/?sweep={sweep['id']}&sort=-final_loss")
    page = compare.content.decode()
    rows = page[page.index('data-testid="compare-table"') :]
    assert rows.index("lr-rank #1") < rows.index("lr-rank #0")
    csv = owner_client.get(f"/p/alpha/compare.csv?sweep={sweep['id']}").content.decode()
    assert csv.splitlines()[0].startswith("job,name,state,")
    assert len(csv.splitlines()) == 5  # the header, two finished trials, two launched since
    form = owner_client.get("/p/alpha/sweeps/new/")
    assert form.status_code == 200 and b"Search space" in form.content


def test_the_sweep_form_makes_the_same_sweep_as_the_api(owner_client: Any, bucket: str) -> None:
    response = owner_client.post(
        "/p/alpha/sweeps/new/",
        {
            "name": "from the form",
            "flavor": "ai1-1-cpu",
            "gpu": "1",
            "base_model": "org/tiny",
            "data_volume": f"{BUCKET}@LOCAL/chat",
            "output_volume": f"{BUCKET}@LOCAL/runs/form",
            "method": "lora",
            "rank": "8",
            "alpha": "16",
            "learning_rate": "0.0002",
            "max_steps": "10",
            "batch_size": "2",
            "grad_accum": "1",
            "max_length": "128",
            "space": "learning_rate = 1e-5, 1e-4\nrank = 4 .. 16",
            "search": "tpe:median",
            "limits": "3 / 1 / 2.50",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    sweep = Sweep.objects.get(name="from the form")
    assert sweep.space == {
        "learning_rate": {"values": [1e-5, 1e-4]},
        "rank": {"low": 4, "high": 16, "log": False},
    }
    assert (sweep.sampler, sweep.pruner, sweep.max_trials, sweep.parallel) == (
        "tpe",
        "median",
        3,
        1,
    )
    assert sweep.max_cost == Decimal("2.50") and sweep.base["params"]["rank"] == 8
    bad = owner_client.post("/p/alpha/sweeps/new/", {"space": "rank 4", "limits": "x"})
    assert bad.status_code == 400
    assert b"Line 1: write" in bad.content and b"trials / at once / max cost" in bad.content


def test_a_member_of_another_project_cannot_reach_a_sweep(
    owner_api: APIClient, outsider_api: APIClient, bucket: str
) -> None:
    sweep = create(owner_api)
    for url in (f"/api/v1/sweeps/{sweep['id']}/?project=alpha", "/api/v1/sweeps/?project=alpha"):
        assert outsider_api.get(url).status_code == 404
    assert outsider_api.post(f"/api/v1/sweeps/{sweep['id']}/stop/?project=beta").status_code == 404
    assert APIClient().get("/api/v1/sweeps/?project=alpha").status_code == 401
    _ = services  # the API and the pages call services only
