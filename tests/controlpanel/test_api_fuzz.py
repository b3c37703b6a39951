"""Schemathesis against the schema the panel serves at /api/schema/: every operation, called
through the real WSGI application (PostgreSQL, the test S3 server) with a project manager's
Bearer token, with inputs generated from the schema, valid and invalid. No answer may be a 5xx,
every answer's status must be one the schema declares for that operation (the error answers are
declared by controlpanel.api.schema.AutoSchema) and must match that status's schema.

Bounded so that `make test` stays fast (about a minute on two idle cores): the coverage phase's
valid boundary values of each field, then FUZZ_EXAMPLES valid and as many invalid inputs per
operation, no shrinking, and a fixed seed (`derandomize`), so that a run is repeatable and CI
does not go red on a new random draw. To explore further, raise FUZZ_EXAMPLES, set the coverage
phase's mode to "all" and drop `derandomize` locally."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from controlpanel.accounts.models import User
from controlpanel.accounts.services import token_create
from controlpanel.engine.models import JobEvent, JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from storage import objects
from tests.controlpanel.buckets.conftest import datastore  # noqa: F401  (the test S3 server)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

FUZZ_EXAMPLES = 6
BUCKET = "fuzzed"
PROJECT = "alpha"  # the `project` fixture's


# Loaded once, at collection: the schema view needs no account and no database.
schema = schemathesis.openapi.from_wsgi(
    "/api/schema/?format=json",
    get_wsgi_application(),
    config=SchemathesisConfig.from_dict(
        {
            "generation": {"mode": "all", "max-examples": FUZZ_EXAMPLES, "no-shrink": True},
            "parameters": {"project_slug": PROJECT, "project": PROJECT},
            "phases": {"coverage": {"generation": {"mode": "positive"}}},
        }
    ),
)


@pytest.fixture
def bearer(project: Project, owner: User, datastore: Any) -> Iterator[dict[str, str]]:  # noqa: F811
    """The Authorization header of a manager of `alpha`, whose project has a finished job with
    logs and a bucket with an object, so that calls naming them reach past the 404. The panel's
    WSGI application closes the database connection after each request, which would end the
    test's transaction: as Django's test client does, that handler is off meanwhile."""
    assert project.slug == PROJECT
    now = timezone.now()
    job = Job.objects.create(
        project=project,
        owner=owner,
        name="fuzzed",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=JobState.DONE,
        exit_code=0,
        started_at=now - timedelta(minutes=2),
        finished_at=now,
        logs_archived=True,
        log_lines=2,
    )
    JobEvent.objects.create(job=job, run=1, state=JobState.DONE, reason="exit code 0")
    JobLogLine.objects.bulk_create(JobLogLine(job=job, run=1, seq=i, text=f"l{i}") for i in (1, 2))
    _, raw = token_create(user=owner, name="fuzz")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    made = client.post(f"/api/v1/buckets/?project={PROJECT}", {"name": BUCKET}, format="json")
    assert made.status_code == 201, made.content
    objects.put_object(datastore, bucket=made.json()["name"], key="dir/a.txt", data=b"abc")
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield {"Authorization": f"Bearer {raw}"}
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_no_5xx_and_matches_its_schema(case: Any, bearer: dict[str, str]) -> None:
    case.call_and_validate(
        headers=bearer,
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
    )
