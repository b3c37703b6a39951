"""A submission never waits for a launch of the same project (#27: sustained submissions).

A launch issues the pods' keys under a lock on the project's row ("one issuer at once",
buckets/credentials.py) and keeps it while it talks to the cluster. A new job's row refers to
the project, and PostgreSQL checks that reference at COMMIT with FOR KEY SHARE on the project's
row: a FOR UPDATE there made every submission of the project wait for every launch in flight
(measured: 300 jobs submitted at 10-13 jobs/s, the web's threads waiting in COMMIT). FOR NO KEY
UPDATE still keeps one issuer at once and lets the references through."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from controlpanel.buckets.credentials import pod_datastore_configs
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project

pytestmark = pytest.mark.django_db(transaction=True)
JOB = {"name": "q", "image": "x/y:1", "command": ["python", "t.py"], "flavor": "ai1-1-cpu"}


@pytest.fixture
def launch_in_flight(project: Project) -> Iterator[None]:
    """A launch between issuing its keys and its commit (on its own connection)."""
    issued, done = threading.Event(), threading.Event()

    def launch() -> None:
        try:
            with transaction.atomic():
                pod_datastore_configs(project=project)
                issued.set()
                done.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=launch)
    thread.start()
    assert issued.wait(30)
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '3s'")  # a wait on the launch fails the test
    try:
        yield
    finally:
        done.set()
        thread.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


def test_a_job_row_commits_while_a_launch_holds_the_issuer_lock(
    launch_in_flight: None, project: Project, owner: Any
) -> None:
    with transaction.atomic():
        flavor = Flavor.objects.get(name="ai1-1-cpu")
        job = Job.objects.create(
            project=project, owner=owner, name="x", image="x/y:1", flavor=flavor
        )
    assert Job.objects.filter(pk=job.pk).exists()


def test_the_api_accepts_a_submission_while_a_launch_holds_the_issuer_lock(
    launch_in_flight: None, owner_api: APIClient, project: Project, settings: Any
) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"  # any image (the local backend runs only presets)
    answer = owner_api.post("/api/v1/jobs/?project=alpha", JOB, format="json")
    assert answer.status_code == 201, answer.content
