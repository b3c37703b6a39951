"""The job list's filters and sorts: validated label and state filters (API 400, page message),
never-started jobs last when sorting by duration."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from controlpanel.engine.selectors import ListFilters as JobFilters
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.selectors import jobs_for_project
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project

pytestmark = pytest.mark.django_db


def make_job(project: Project, owner: Any, name: str, **fields: Any) -> Job:
    flavor = Flavor.objects.get(name="ai1-1-cpu")
    return Job.objects.create(
        project=project, owner=owner, name=name, image="x/y:1", flavor=flavor, **fields
    )


@pytest.fixture
def jobs(project: Project, owner: Any) -> dict[str, Job]:
    return {
        "nlp": make_job(project, owner, "nlp", labels={"team": "nlp", "a__isnull": "x"}),
        "cv": make_job(project, owner, "cv", labels={"team": "cv"}, state=JobState.RUNNING),
        "bare": make_job(project, owner, "bare", labels={"note": ""}, state=JobState.FAILED),
    }


def api_names(owner_api: APIClient, query: str) -> list[str]:
    response = owner_api.get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 200, response.content
    return sorted(job["name"] for job in response.json()["results"])


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("label=team=nlp", ["nlp"]),
        ("label=team", ["cv", "nlp"]),
        ("label=a__isnull=x", ["nlp"]),  # a plain label key, not a lookup
        ("label=a__isnull", ["nlp"]),
        ("label=note=", ["bare"]),
        ("label=team=", []),
        ("state=running", ["cv"]),
        ("state=Failed", ["bare"]),
        ("state=", ["bare", "cv", "nlp"]),
    ],
)
def test_api_filters(
    owner_api: APIClient, jobs: dict[str, Job], query: str, names: list[str]
) -> None:
    assert api_names(owner_api, query) == names


@pytest.mark.parametrize(
    "label",
    [
        "a__regex=(",
        "a b",
        "=x",
        "-a",
        "a=b=c",
        "a" * 64,
        "team=nlp)",
        "a__in=[1]",
        "team\n",
        "team=nlp\n",
    ],
)
def test_api_rejects_a_bad_label_filter(
    owner_api: APIClient, jobs: dict[str, Job], label: str
) -> None:
    response = owner_api.get("/api/v1/jobs/", {"label": label})
    assert response.status_code == 400
    assert response.json() == {
        "label": [
            f"Bad label filter {label!r}: give key or key=value; keys and values are up to 63 "
            "letters, digits, - _ . starting and ending with a letter or digit."
        ]
    }


def test_api_rejects_an_unknown_state_naming_the_valid_ones(
    owner_api: APIClient, jobs: dict[str, Job]
) -> None:
    response = owner_api.get("/api/v1/jobs/?state=BOGUS")
    assert response.status_code == 400
    message = response.json()["state"][0]
    assert message.startswith("Unknown state 'BOGUS': choose one of QUEUED, INITIALIZING,")
    assert all(name in message for name in JobState.values)


def test_page_shows_a_bad_filter_and_lists_unfiltered(
    owner_client: Client, jobs: dict[str, Job]
) -> None:
    response = owner_client.get("/p/alpha/jobs/", {"label": "a__regex=(", "state": "BOGUS"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Bad label filter &#x27;a__regex=(&#x27;" in page
    assert "Unknown state &#x27;BOGUS&#x27;: choose one of QUEUED" in page
    assert all(f">{name}</a>" in page for name in ("nlp", "cv", "bare"))
    after_messages = page.split('class="messages"', 1)[1].split("</ul>", 1)[1]
    assert "a__regex" not in after_messages  # the form, the pager and polling drop it
    assert "Bad label" not in owner_client.get("/p/alpha/jobs/").content.decode()  # not kept


def test_page_filters_state_in_any_case(owner_client: Client, jobs: dict[str, Job]) -> None:
    page = owner_client.get("/p/alpha/jobs/?state=running&label=team").content.decode()
    assert ">cv</a>" in page and ">nlp</a>" not in page
    assert '<option value="RUNNING" selected>' in page


def test_page_filters_by_label_value(owner_client: Client, jobs: dict[str, Job]) -> None:
    """The web list used to drop the filter on SQLite; test_sqlite.py runs this there too."""
    page = owner_client.get("/p/alpha/jobs/?label=team=nlp").content.decode()
    assert ">nlp</a>" in page and ">cv</a>" not in page and ">bare</a>" not in page


def test_fragment_with_a_bad_filter_reloads_the_page(
    owner_client: Client, jobs: dict[str, Job]
) -> None:
    response = owner_client.get("/p/alpha/jobs/?label=a__isnull=(", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/p/alpha/jobs/?label=a__isnull=("


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(label=st.text(st.sampled_from("aZ9_-.=()[]$%\n\x00é") | st.characters(), max_size=16))
def test_any_label_filter_is_rejected_or_runs(project: Project, label: str) -> None:
    try:
        list(jobs_for_project(project=project, filters=JobFilters(label=label)))
    except ValidationError as error:
        assert list(error.message_dict) == ["label"]


def test_duration_sorts_put_never_started_jobs_last(project: Project, owner: Any) -> None:
    now = timezone.now()
    make_job(project, owner, "never")
    make_job(project, owner, "short", started_at=now - timedelta(minutes=1), finished_at=now)
    make_job(project, owner, "long", started_at=now - timedelta(hours=1))
    for sort, names in [("-duration", ["long", "short"]), ("duration", ["short", "long"])]:
        found = jobs_for_project(project=project, filters=JobFilters(sort=sort))
        assert [job.name for job in found] == [*names, "never"]
