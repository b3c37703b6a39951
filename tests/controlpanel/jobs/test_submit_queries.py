"""A submission through the API (POST /api/v1/jobs/, /api/v1/notebooks/) costs a bounded
number of queries (#27: sustained submissions): the answer is built from the row just stored,
with no read back of the workload, its runs or its events, and is the same as the row read
back (GET) right after."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controlpanel.projects.models import Project

JOB = {"name": "q", "image": "x/y:1", "command": ["python", "t.py"], "flavor": "ai1-1-cpu"}
NOTEBOOK = {"name": "nb", "image": "python", "flavor": "ai1-1-cpu"}

# token, project, membership; BEGIN, flavor, insert workload, insert event, insert audit,
# COMMIT; the queue position (a count). No nested SAVEPOINT, no read back (15 before). A
# notebook also reads its image (the admin's list).
MOST = {"/api/v1/jobs/": 10, "/api/v1/notebooks/": 11}


def _submit(api: APIClient, path: str, body: dict[str, Any]) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        answer = api.post(f"{path}?project=alpha", body, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json(), [q["sql"] for q in queries.captured_queries]


@pytest.mark.parametrize(
    ("path", "body"), [("/api/v1/jobs/", JOB), ("/api/v1/notebooks/", NOTEBOOK)]
)
def test_a_submission_costs_few_queries_and_answers_the_stored_row(
    owner_api: APIClient, project: Project, settings: Any, path: str, body: dict[str, Any]
) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"  # any image (the local backend runs only presets)
    first, _ = _submit(owner_api, path, {**body, "name": f"{body['name']}-1"})
    answer, sql = _submit(owner_api, path, body)
    assert len(sql) <= MOST[path], "\n".join(sql)
    # One transaction, no nested one: under the test's own transaction BEGIN/COMMIT read as
    # one SAVEPOINT and its RELEASE.
    assert len([s for s in sql if s.startswith("SAVEPOINT")]) == 1, sql
    # The answer is the row as stored, with its one event and its place behind the first.
    again = owner_api.get(f"{path}{answer['id']}/?project=alpha").json()
    assert answer == again
    assert answer["state"] == first["state"] and answer["cost"] is None
    assert answer["queue_position"]["local"] == first["queue_position"]["local"] + 1
    if path == "/api/v1/jobs/":
        assert [(e["state"], e["reason"]) for e in answer["history"]] == [("QUEUED", "submitted")]
