"""The page of a waiting job or notebook says its place in the queue once: the live badge,
not also the position admission wrote into the reason (issue 32)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_log_view import make_job
from tests.controlpanel.notebooks.test_notebook_pages import make_notebook

WAITING = "waiting: project CPU quota 2 vCPU, 2 in use, this job needs 1"


def test_a_waiting_jobs_page_says_its_position_once(
    owner_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(
        project,
        owner,
        (),
        state=JobState.QUEUED,
        queued_at=timezone.now() - timedelta(1),
        state_reason=f"{WAITING}; position 3 in the queue",  # written when 2 were ahead
    )
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert page.count("in the queue") == 1
    assert "position 1 in the queue" in page and WAITING in page


def test_a_waiting_notebooks_page_says_its_position_once(
    owner_client: Client, project: Project, owner: Any
) -> None:
    notebook = make_notebook(
        project,
        owner,
        state="QUEUED",
        queued_at=timezone.now(),
        state_reason=f"{WAITING}; position 1 in the queue",
    )
    page = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert page.count("position 1 in the queue") == 1 and WAITING in page
