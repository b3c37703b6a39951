"""A log poller's question with nothing new is answered 204 from one indexed query (the
workload's run, state and whether a later line exists), for jobs, notebooks and apps alike;
anything else (a line came, the run changed, the log ended, another project's workload) goes the
whole way."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controlpanel.engine.models import JobLogLine
from controlpanel.jobs.states import JobState
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState as N
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_log_view import make_job
from tests.controlpanel.notebooks.test_notebook_pages import running

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_a_notebooks_idle_log_poll_is_204_then_the_new_line(
    owner_client: Client, outsider_client: Client, client: Client, project: Project, owner: Any
) -> None:
    notebook = running(project, owner)
    JobLogLine.objects.create(job=notebook, run=1, seq=1, text="line 1")
    Notebook.objects.filter(pk=notebook.pk).update(log_lines=1)
    poll = f"/p/alpha/notebooks/{notebook.pk}/logs/?run=1&after=1"
    idle = owner_client.get(poll, **HTMX)
    assert idle.status_code == 204 and idle.content == b""
    JobLogLine.objects.create(job=notebook, run=1, seq=2, text="<i>line 2</i>")
    fresh = owner_client.get(poll, **HTMX).content.decode()
    assert "&lt;i&gt;line 2&lt;/i&gt;" in fresh and "<i>" not in fresh
    # A stopped notebook whose log is archived: its end, not a 204.
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STOPPED, logs_archived=True)
    ended = owner_client.get(poll.replace("after=1", "after=2"), **HTMX).content.decode()
    assert 'data-testid="log-end"' in ended
    assert outsider_client.get(poll, **HTMX).status_code == 404
    assert client.get(poll, **HTMX).status_code in (302, 401, 403)


def test_the_idle_job_poll_reads_one_workload_row_and_no_lines(
    owner_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    poll = f"/p/alpha/jobs/{job.pk}/logs/?run=1&after=3"
    owner_client.get(poll, **HTMX)
    with CaptureQueriesContext(connection) as queries:
        assert owner_client.get(poll, **HTMX).status_code == 204
    workload_reads = [q["sql"] for q in queries if 'FROM "workloads_workload"' in q["sql"]]
    assert len(workload_reads) == 1 and "EXISTS" in workload_reads[0]
    assert not [q["sql"] for q in queries if q["sql"].startswith('SELECT "workloads_joblogline"')]
    # A poll of an earlier run, or with a bad offset, is answered whole (not 204).
    assert owner_client.get(poll.replace("run=1", "run=0"), **HTMX).status_code != 204
    assert owner_client.get(poll.replace("after=3", "after=x"), **HTMX).status_code == 200
