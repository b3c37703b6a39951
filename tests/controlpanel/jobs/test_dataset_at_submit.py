"""A fine-tune whose dataset prefix holds no *.jsonl training file is refused at submit (#32):
400 under the dataset volume's field, nothing made, nothing billed; one with a training file
(at any depth) goes on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from controlpanel.billing.models import Line
from controlpanel.buckets.models import Bucket
from controlpanel.jobs.datasets import is_training_file
from controlpanel.jobs.models import Job
from controlpanel.jobs.validation import validate_job
from controlpanel.projects.models import Project
from storage.datastore import DatastoreConfig
from storage.objects import put_object

FINETUNE = {"preset": "finetune", "flavor": "ai1-1-cpu", "params": {"base_model": "x/y"}}


def finetune(bucket: str, prefix: str) -> dict[str, Any]:
    data = f"{bucket}@LOCAL/{prefix}:/workspace/data"
    return FINETUNE | {"volumes": [data, f"{bucket}@LOCAL/out:/workspace/output:rw"]}


def test_an_empty_or_jsonl_less_prefix_is_refused_over_the_api(
    owner_api: APIClient, project: Project, data_bucket: Bucket, panel_s3: DatastoreConfig
) -> None:
    put_object(panel_s3, bucket=data_bucket.name, key="notes/readme.txt", data=b"hi")
    put_object(panel_s3, bucket=data_bucket.name, key="notes/eval.jsonl", data=b"{}\n")
    for prefix, held in (("nothing", "is empty"), ("notes", "holds no *.jsonl training file")):
        body = finetune(data_bucket.name, prefix) | {"project": project.slug}
        answer = owner_api.post("/api/v1/jobs/", body, format="json")
        assert answer.status_code == 400, answer.content
        said = json.dumps(answer.json())
        assert f"/workspace/data ({data_bucket.name}/{prefix}/) {held}" in said
        assert '"volumes.0"' in said
    assert not Job.objects.exists() and not Line.objects.exists()


def test_a_training_file_at_any_depth_is_enough(
    project: Project, data_bucket: Bucket, panel_s3: DatastoreConfig
) -> None:
    put_object(panel_s3, bucket=data_bucket.name, key="sets/a/b/train.jsonl", data=b"{}\n")
    spec = validate_job(project=project, data=finetune(data_bucket.name, "sets"))
    assert spec.preset == "finetune"
    with pytest.raises(ValidationError) as caught:
        validate_job(project=project, data=finetune(data_bucket.name, "set"))
    assert "is empty" in caught.value.message_dict["volumes.0"][0]


@pytest.mark.parametrize(
    ("key", "trains"),
    [
        ("d/train.jsonl", True),
        ("d/x/chat.jsonl", True),
        ("d/eval.jsonl", False),
        ("d/Validation.jsonl", False),
        ("d/.hidden.jsonl", False),
        ("d/train.json", False),
    ],
)
def test_which_keys_are_training_files(key: str, trains: bool) -> None:
    assert is_training_file(key) is trains
