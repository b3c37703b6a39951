"""Job logs that any job can print: progress lines with missing or non-finite numbers never stop
collection; the API logs endpoint survives cluster errors, answers with or without the slash and
serves older runs (`?run=`), as does the web download."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.engine import backend as job_backend
from controlpanel.engine import logs
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.collector import LogCollector
from controlpanel.engine.logs import _note_progress
from controlpanel.engine.models import JobLogLine
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.engine.templatetags.jobs import loss_chart, percent, seconds
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from deploy.types import TransientError
from tests.fixtures.jobs import submit

# What a custom job may print: no `step`, NaN/Infinity (Python's json reads them), wrong types,
# a NUL character (PostgreSQL stores none), and fields the panel does not know.
BAD_LINES = (
    '{"event":"progress","loss":0.5}',
    '{"event":"progress","step":3,"max_steps":10,"loss":NaN,"eta_s":Infinity}',
    '{"event":"progress","step":"4","max_steps":true,"loss":[1],"tokens_per_s":-Infinity}',
    '{"event":"progress","step":1e400,"epoch":12345678901234567890123456789}',
    '{"event":"error","kind":"runtime","message":"nul \\u0000 here","exit_code":1.5,'
    '"errors":[{"file":"a","line":NaN,"message":"\\ud800"}],"extra":{"x":NaN}}',
    "plain \x00 text line",
)
GOOD_LINE = '{"event":"progress","step":5,"max_steps":10,"loss":0.25,"eta_s":12.5}'


def make_job(project: Project, owner: Any, **fields: Any) -> Job:
    defaults = {"name": "job", "image": "x/y:1", "flavor": Flavor.objects.get(name="ai1-1-cpu")}
    return Job.objects.create(project=project, owner=owner, **(defaults | fields))


def test_bad_progress_fields_are_dropped_and_json_stays_strict(
    project: Project, owner: Any
) -> None:
    job = make_job(project, owner)
    _note_progress(job, (*BAD_LINES, GOOD_LINE))
    json.dumps([job.progress, job.loss_curve], allow_nan=False)  # no NaN or Infinity left
    job.save()  # PostgreSQL accepts it
    job.refresh_from_db()
    # only the point with both a step and a finite loss (no tokens/s, no learning rate)
    assert job.loss_curve == [[5, 0.25, None, None]]
    assert job.progress["step"] == 5 and job.progress["last_event"] == "progress"
    assert job.progress["message"] == "nul \ufffd here" and job.progress["errors"] == [
        {"file": "a", "line": None, "message": "?"}
    ]
    assert "extra" not in job.progress and "exit_code" not in job.progress  # 1.5 is no exit code


def test_each_bad_line_alone_is_harmless(project: Project, owner: Any) -> None:
    for line in BAD_LINES:
        job = make_job(project, owner)
        _note_progress(job, (line,))
        job.save()
        job.refresh_from_db()
        assert all(not isinstance(v, float) or math.isfinite(v) for v in job.progress.values()), (
            line
        )


def test_template_filters_tolerate_missing_and_bad_values() -> None:
    assert percent({}) == 0 and percent({"step": 5}) == 0 and percent(None) == 0
    assert percent({"step": "x", "max_steps": 10}) == 0
    assert percent({"step": float("nan"), "max_steps": 10}) == 0
    assert (
        percent({"step": 50, "max_steps": 10}) == 100 and percent({"step": 3, "max_steps": 4}) == 75
    )
    for bad in (None, "", "soon", float("nan"), float("inf"), 10**400, True, [1]):
        assert seconds(bad) == "—", bad
    assert seconds(125.7) == "2 min 05 s"
    assert not loss_chart("nope")["shown"] and not loss_chart([[1, None], [2]])["shown"]
    chart = loss_chart(
        [[1, 2.0], ["x", 1.0], [2, float("nan")], [3, 1.0, 900.5, 2e-4], None, [4, 0.9, "x", None]]
    )
    assert chart["shown"] and chart["data"] == {
        "steps": [1, 3, 4],
        "loss": [2.0, 1.0, 0.9],
        "tokens_per_s": [None, 900.5, None],
        "learning_rate": [None, 2e-4, None],
    }


NS = "ajuste-alpha"


@pytest.mark.k8s
def test_a_custom_job_printing_bad_lines_is_collected_served_and_archived(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    owner_client: Client,
    owner_api: APIClient,
) -> None:
    job = submit(project, owner)
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    kubelet, pod = k8s_cluster.kubelet, k8s_cluster.pod_of(NS, names.job_name(job_ref(job)))
    kubelet.run(NS, pod)
    kubelet.log(NS, pod, *BAD_LINES, GOOD_LINE)
    sweep()
    LogCollector().tick()  # the watcher's collector stores the lines; pages only read them
    page = owner_api.get(f"/api/v1/jobs/{job.pk}/logs?project=alpha")  # the documented path
    assert page.status_code == 200, page.content
    texts = [line["text"] for line in page.json()["lines"]]
    assert texts == [*BAD_LINES[:-1], "plain \ufffd text line", GOOD_LINE]
    assert owner_client.get(f"/p/alpha/jobs/{job.pk}/").status_code == 200
    fragment = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?after=0", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    kubelet.log(NS, pod, "after the bad lines")
    kubelet.finish(NS, pod, exit_code=0)
    sweep()
    assert logs.archive_logs(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.DONE and job.log_lines == len(texts) + 1
    assert job.progress["step"] == 5 and job.loss_curve == [[5, 0.25, None, None]]
    final = owner_api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha&after=7").json()
    assert [x["text"] for x in final["lines"]] == ["after the bad lines"] and final["eof"] is True
    download = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/download/")
    assert GOOD_LINE in b"".join(download.streaming_content).decode()  # type: ignore[attr-defined]


class BrokenBackend:
    """A backend whose cluster does not answer, whatever is asked."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise TransientError("the cluster did not answer")

        return fail


@pytest.fixture
def broken_backend() -> Any:
    job_backend.set_backend(BrokenBackend())  # type: ignore[arg-type]
    yield
    job_backend.set_backend(None)


def test_pages_and_the_api_serve_stored_lines_when_the_cluster_fails(
    broken_backend: Any, project: Project, owner: Any, owner_api: APIClient, owner_client: Client
) -> None:
    """No GET asks the cluster anything: a cluster that answers nothing changes no page."""
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1, log_lines=1)
    JobLogLine.objects.create(job=job, run=1, seq=1, text="stored")
    page = owner_api.get(f"/api/v1/jobs/{job.pk}/logs?project=alpha")
    assert page.status_code == 200
    body = page.json()
    assert [x["text"] for x in body["lines"]] == ["stored"] and body["eof"] is False
    assert body["run"] == 1 and "warning" not in body
    assert owner_api.get(f"/api/v1/jobs/{job.pk}/?project=alpha").json()["state"] == "RUNNING"
    base = f"/p/alpha/jobs/{job.pk}/"
    for url in (base, base + "status/", base + "logs/?after=0", "/p/alpha/jobs/"):
        assert owner_client.get(url, HTTP_HX_REQUEST="true").status_code == 200, url
    download = owner_client.get(base + "logs/download/")
    assert b"".join(download.streaming_content) == b"stored\n"  # type: ignore[attr-defined]
    # The collector meets the failure instead, logs it and goes on.
    assert LogCollector().tick() == [str(job.pk)]


def test_earlier_runs_are_served_by_the_api_and_the_download(
    project: Project, owner: Any, owner_api: APIClient, owner_client: Client
) -> None:
    job = make_job(
        project, owner, state=JobState.DONE, run=2, launched_run=2, log_lines=1, logs_archived=True
    )
    JobLogLine.objects.bulk_create(
        [
            JobLogLine(job=job, run=1, seq=1, text="first run a"),
            JobLogLine(job=job, run=1, seq=2, text="first run b"),
            JobLogLine(job=job, run=2, seq=1, text="second run"),
        ]
    )
    url = f"/api/v1/jobs/{job.pk}/logs/?project=alpha"
    current = owner_api.get(url).json()
    assert [x["text"] for x in current["lines"]] == ["second run"] and current["run"] == 2
    first = owner_api.get(url + "&run=1&after=1").json()
    assert [x["text"] for x in first["lines"]] == ["first run b"] and first["eof"] is True
    assert owner_api.get(url + "&run=1&limit=1").json()["eof"] is False
    for bad in ("0", "3", "x", "1.5"):
        refused = owner_api.get(url + f"&run={bad}")
        assert refused.status_code == 400 and "run" in refused.json(), bad
    download = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/download/?run=1")
    assert download.status_code == 200 and "run1.log" in download["Content-Disposition"]
    body = b"".join(download.streaming_content).decode()  # type: ignore[attr-defined]
    assert body == "first run a\nfirst run b\n"
    missing = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/download/?run=7")
    assert missing.status_code == 404 and b"runs are 1 to 2" in missing.content
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert f'href="/p/alpha/jobs/{job.pk}/logs/download/?run=1">run 1</a>' in page


def test_run_parameter_keeps_project_scoping(
    project: Project, owner: Any, outsider_api: APIClient, outsider_client: Client
) -> None:
    job = make_job(project, owner, state=JobState.DONE, logs_archived=True)
    JobLogLine.objects.create(job=job, run=1, seq=1, text="secret")
    for path in (f"/api/v1/jobs/{job.pk}/logs", f"/api/v1/jobs/{job.pk}/logs/"):
        assert outsider_api.get(path + "?project=alpha&run=1").status_code == 404
        assert outsider_api.get(path + "?project=beta&run=1").status_code == 404
        assert APIClient().get(path + "?project=alpha&run=1").status_code == 401
    download = f"/p/alpha/jobs/{job.pk}/logs/download/?run=1"
    assert outsider_client.get(download).status_code == 404
    assert Client().get(download).status_code == 302


def test_routes_answer_with_and_without_the_trailing_slash(owner_api: APIClient) -> None:
    for path in ("/api/v1/jobs", "/api/v1/jobs/", "/api/v1/flavors", "/api/v1/projects/"):
        assert owner_api.get(path + "?project=alpha").status_code == 200, path
