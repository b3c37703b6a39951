"""One submission contract (controlpanel/engine/contract.py): every problem under a stable
key (`volumes.1`, `env.HF_TOKEN`, `params.rank`) in the API's 400 and beside the right widget
of the form; a rendered spec over its limits is refused at submit, naming the limit; the API's
request schema is the contract's fields."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.buckets.models import Bucket
from controlpanel.engine import contract
from controlpanel.jobs.models import Job
from storage.volumes import Mode, VolumeSpec

GOOD = {
    "image": "registry.example.com/train:1",
    "command": ["python", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 1,
}
URL = "/api/v1/jobs/?project=alpha"


def refused(api: APIClient, **changes: Any) -> dict[str, list[str]]:
    response = api.post(URL, GOOD | changes, format="json")
    assert response.status_code == 400, response.content
    assert not Job.objects.exists()
    return response.json()


def test_the_api_answers_each_problem_under_its_key(
    owner_api: APIClient, data_bucket: Bucket, k8s_jobs: Any
) -> None:
    good = f"{data_bucket.name}@LOCAL/in:/workspace/data"
    errors = refused(
        owner_api,
        volumes=[good, "nobucket", f"{data_bucket.name}@LOCAL/x:/workspace/data/sub"],
        env={"OK": "1", "AWS_KEY": "x", "HF_TOKEN": "secret:nope"},
        labels={"team": "nlp", "bad key!": "v"},
        command=["python", 3],
    )
    assert sorted(errors) == [
        "command.1",
        "env.AWS_KEY",
        "env.HF_TOKEN",
        "labels.bad key!",
        "volumes.1",
        "volumes.2",
    ]
    assert errors["volumes.1"] == [
        "'nobucket' at character 9: missing '@<ALIAS>' after the bucket name; expected "
        "<bucket>@<ALIAS>[/<prefix>]:<mount path>[:ro|rw|rwd]"
    ]
    assert (
        "nested mount paths (/workspace/data/sub is inside /workspace/data)"
        in (errors["volumes.2"][0])
    )
    assert errors["env.HF_TOKEN"][0].startswith("HF_TOKEN: this project has no secret named nope")


def test_preset_parameters_are_keyed_by_their_name(
    owner_api: APIClient, data_bucket: Bucket, k8s_jobs: Any
) -> None:
    b = data_bucket.name
    finetune = {
        "preset": "finetune",
        "image": "",
        "command": [],
        "flavor": "h100-1-gpu",
        "volumes": [f"{b}@LOCAL/d:/workspace/data", f"{b}@LOCAL/o:/workspace/output:rw"],
    }
    errors = refused(owner_api, **finetune, params={"rank": "x", "base_model": "org/m"})
    assert errors == {"params.rank": ["argument --rank: invalid int value: 'x'"]}
    errors = refused(owner_api, **finetune, params={"rank": 0, "wat": 1})
    assert list(errors) == ["params.wat"]  # unknown names first: nothing else is parsed
    errors = refused(owner_api, **finetune, params={"learning_rate": 0})
    assert errors == {
        "params.learning_rate": ["--learning-rate must be positive"],
        "params.base_model": [
            "The fine-tune preset needs either a model volume at /workspace/model or "
            "params.base_model (a hub id), not both."
        ],
    }


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        (
            {"env": {f"V{i}": "x" for i in range(contract.MAX_ENV_VARS + 1)}},
            "env",
            "At most 100 variables (there are 101).",
        ),
        (
            {"env": {"A": "é" * 20_000}},
            "env.A",
            "The value of A is 40,000 bytes; the limit is 32,768 (32 KiB).",
        ),
        (
            {"env": {f"V{i}": "x" * 30_000 for i in range(3)}},
            "env",
            "The environment (names and values) is 90,006 bytes; the limit is 65,536 (64 KiB).",
        ),
        (
            {"command": ["x" * 9_999] * 7},
            "command",
            "The command is 70,000 bytes; the limit is 65,536 (64 KiB).",
        ),
        ({"command": ["x"] * 201}, "command", "At most 200 arguments (there are 201)."),
        ({"command": ["a", "b\x00"]}, "command.1", "'b\\x00' is not an argument: give text"),
        (
            {"volumes": [f"b@LOCAL:/workspace/{i}" for i in range(33)]},
            "volumes",
            "At most 32 volumes (there are 33).",
        ),
        ({"labels": {f"k{i}": "v" for i in range(33)}}, "labels", "At most 32 labels"),
    ],
)
def test_a_spec_over_its_limits_is_a_400_naming_the_limit(
    owner_api: APIClient, k8s_jobs: Any, changes: dict[str, Any], key: str, message: str
) -> None:
    errors = refused(owner_api, **changes)
    assert key in errors, errors
    assert errors[key][0].startswith(message), errors[key]


def test_a_spec_at_its_limits_is_taken(owner_api: APIClient, k8s_jobs: Any, panel_s3: Any) -> None:
    env = {"A": "x" * contract.MAX_ENV_VALUE_BYTES, "B": "y" * 30_000}
    command = ["x" * 9_999] * 6  # 60,000 bytes
    response = owner_api.post(URL, GOOD | {"env": env, "command": command}, format="json")
    assert response.status_code == 201, response.content
    assert Job.objects.get().env == env


def test_the_custom_form_puts_a_volume_problem_on_its_line(
    owner_client: Client, data_bucket: Bucket, k8s_jobs: Any
) -> None:
    good = f"{data_bucket.name}@LOCAL/in:/workspace/data"
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=custom",
        {
            "tab": "custom",
            "c-image": "x/y:1",
            "c-flavor": "h100-1-gpu",
            "c-gpu": "1",
            "c-volumes": f"{good}\n\n  nobucket  \n",
            "c-env": "AWS_KEY=1",
        },
    )
    assert response.status_code == 400
    form = response.context["custom"]
    assert form.errors["volumes"] == [
        "Line 3: 'nobucket' at character 9: missing '@<ALIAS>' after the bucket name; expected "
        "<bucket>@<ALIAS>[/<prefix>]:<mount path>[:ro|rw|rwd]"
    ]
    assert form.errors["env"] == [
        "AWS_KEY is reserved: credentials reach jobs only through volumes."
    ]
    assert not Job.objects.exists()


def test_the_finetune_form_puts_preset_problems_on_their_fields(
    owner_client: Client, data_bucket: Bucket, k8s_jobs: Any
) -> None:
    b = data_bucket.name
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=finetune",
        {
            "tab": "finetune",
            "ft-base_model": "org/model",
            "ft-model_volume": f"{b}@LOCAL/llama",  # and a hub id: one too many
            "ft-data_volume": f"{b}@LOCAL/chat",
            "ft-output_volume": f"{b}@LOCAL/chat/out",  # inside the dataset's prefix: fine
            "ft-method": "lora",
            "ft-rank": "8",
            "ft-alpha": "16",
            "ft-learning_rate": "0",
            "ft-epochs": "1",
            "ft-batch_size": "1",
            "ft-grad_accum": "1",
            "ft-max_length": "256",
            "ft-flavor": "h100-1-gpu",
            "ft-gpu": "1",
        },
    )
    assert response.status_code == 400
    form = response.context["finetune"]
    assert form.errors["learning_rate"] == ["--learning-rate must be positive"]
    assert "either a model volume" in form.errors["base_model"][0]
    assert set(form.errors) == {"learning_rate", "base_model"}


def test_a_job_carries_its_parsed_volume_specs(
    owner: Any, project: Any, data_bucket: Bucket, k8s_jobs: Any
) -> None:
    from tests.fixtures.jobs import submit

    b = data_bucket.name
    job = submit(project, owner, volumes=[f"{b}@LOCAL/runs/:/workspace/out/:rw"])
    assert job.volumes == [f"{b}@LOCAL/runs:/workspace/out:rw"]  # stored canonical
    assert Job.objects.get().volume_specs == (
        VolumeSpec(
            bucket=b, alias="LOCAL", prefix="runs", mount_path="/workspace/out", mode=Mode.RW
        ),
    )
