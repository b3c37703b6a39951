"""The job form as people read it: the timeout written as `2h` or `7d` (the API keeps seconds),
units labelled by what one unit of the chosen flavor is, help texts without Markdown."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from controlpanel.buckets.models import Bucket
from controlpanel.engine.durations import DurationError, format_duration, parse_duration
from controlpanel.jobs.models import Job

VALIDATE = {"HTTP_HX_REQUEST": "true"}


def finetune(bucket: Bucket, **changes: str) -> dict[str, str]:
    return {
        "tab": "finetune",
        "ft-base_model": "org/model",
        "ft-data_volume": f"{bucket.name}@LOCAL/chat",
        "ft-output_volume": f"{bucket.name}@LOCAL/out",
        "ft-method": "lora",
        "ft-rank": "16",
        "ft-alpha": "32",
        "ft-learning_rate": "0.0002",
        "ft-batch_size": "4",
        "ft-grad_accum": "1",
        "ft-max_length": "512",
        "ft-flavor": "ai1-1-cpu",
        "ft-gpu": "1",
    } | {f"ft-{k}": v for k, v in changes.items()}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2h", 7200),
        ("30m", 1800),
        ("1h30m", 5400),
        ("7d", 604800),
        ("1 h 30 min", 5400),
        ("3600", 3600),
        ("2 hours", 7200),
        ("1w", 604800),
        ("45S", 45),
    ],
)
def test_durations_as_people_write_them(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1.5h", "2x", "h", "2h and", "-5m"])
def test_what_is_not_a_duration_says_how_to_write_one(text: str) -> None:
    with pytest.raises(DurationError, match="30m, 2h"):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**9))
def test_a_shown_duration_reads_back_as_the_same_seconds(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_the_timeout_is_submitted_as_2h_and_kept_in_seconds(
    owner_client: Client, data_bucket: Bucket
) -> None:
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=finetune", finetune(data_bucket, timeout="2h")
    )
    assert response.status_code == 302, response.context["form"].errors
    assert Job.objects.get().timeout == 7200


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "soon",
            "“soon” is not a duration: write a number and a unit (s, m, h, d), "
            "e.g. 30m, 2h, 1h30m or 7d.",
        ),
        ("10s", "Between 1m and 30d (“10s” is 10s)."),
        ("31d", "Between 1m and 30d (“31d” is 31d)."),
    ],
)
def test_a_bad_timeout_is_named_and_nothing_is_saved(
    owner_client: Client, data_bucket: Bucket, text: str, error: str
) -> None:
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=finetune", finetune(data_bucket, timeout=text)
    )
    assert response.status_code == 400
    assert response.context["form"].errors["timeout"] == [error]
    assert not Job.objects.exists()


def test_the_form_starts_with_a_timeout_of_7d(owner_client: Client, panel_s3: Any) -> None:
    page = owner_client.get("/p/alpha/jobs/new/?tab=finetune").content.decode()
    assert 'name="ft-timeout" value="7d"' in page


@pytest.mark.parametrize(
    ("flavor", "label", "unit"),
    [
        ("ai1-1-cpu", "Units (1 vCPU each)", "One unit of ai1-1-cpu: 1 vCPU, 4 GiB."),
        ("h100-1-gpu", "Units (1 GPU each)", "One unit of h100-1-gpu: 1× H100 80 GB, 30 vCPU"),
    ],
)
def test_units_say_what_one_unit_of_the_chosen_flavor_is(
    owner_client: Client, data_bucket: Bucket, gpu_machine: Any, flavor: str, label: str, unit: str
) -> None:
    data = finetune(data_bucket, flavor=flavor) | {"validate": "1"}
    page = owner_client.post("/p/alpha/jobs/new/?tab=finetune", data, **VALIDATE).content.decode()
    assert f'<label for="id_ft-gpu">{label}</label>' in page
    assert unit in page
    assert "GPUs)" not in page and "`" not in page


def test_no_help_text_shows_raw_markdown(owner_client: Client, panel_s3: Any) -> None:
    for tab in ("finetune", "custom"):
        page = owner_client.get(f"/p/alpha/jobs/new/?tab={tab}").content.decode()
        assert "`" not in page


def test_live_validation_judges_what_was_typed_not_what_is_still_empty(
    owner_client: Client, data_bucket: Bucket
) -> None:
    data = finetune(data_bucket, data_volume="", output_volume="", timeout="soon")
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=finetune", data | {"validate": "1"}, **VALIDATE
    )
    form = response.context["form"]
    assert "data_volume" not in form.errors and "output_volume" not in form.errors
    assert list(form.errors) == ["timeout"]
    submitted = owner_client.post("/p/alpha/jobs/new/?tab=finetune", data)
    assert submitted.status_code == 400  # a real submission says what is missing
    assert "This field is required." in submitted.context["form"].errors["data_volume"]
    assert not Job.objects.exists()
