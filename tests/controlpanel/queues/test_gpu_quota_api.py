"""The project's GPU quota at admission, as the API shows it: with a quota of 1 GPU, two 1-GPU
jobs submitted through the API: the first is admitted, the second waits and says why (the
quota, what is in use, what it needs); a job asking more than the quota is told it never fits.
Beside test_queues' service-level test of the built-in engine."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.engine.admission import admit_jobs
from controlpanel.projects.models import Project

pytestmark = pytest.mark.django_db
SPEC = {
    "image": "registry.example.com/train:1",
    "command": ["python", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 1,
}


def test_the_second_job_waits_for_the_gpu_quota_and_the_api_says_why(
    k8s_jobs: Any, project: Project, owner_api: Any
) -> None:
    Project.objects.filter(pk=project.pk).update(gpu_quota=1)
    ids = []
    for name in ("first", "second"):
        made = owner_api.post("/api/v1/jobs/?project=alpha", SPEC | {"name": name}, format="json")
        assert made.status_code == 201, made.content
        ids.append(made.json()["id"])

    assert admit_jobs(project_id=project.pk) == [ids[0]]
    first, second = (owner_api.get(f"/api/v1/jobs/{pk}/?project=alpha").json() for pk in ids)
    assert "quota" not in first["state_reason"]
    assert second["state"] == "QUEUED"
    assert second["state_reason"] == (
        "waiting: project GPU quota 1 GPUs, 1 in use, this job needs 1; position 1 in the queue"
    )
