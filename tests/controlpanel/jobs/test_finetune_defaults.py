"""The CLI's fine-tune defaults are the web form's (issue 32): a fine-tune submitted with
`ajuste job run --preset finetune` and only its volumes runs exactly as one submitted from the
form left at its initial values: the same flavor, units, nodes, timeout and preemptibility,
and a command the entry point parses to the same options. Both read one definition: the form's
initial hyper-parameters are the entry point's own defaults (jobs/presets.MAIN_PARAMS)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.buckets.models import Bucket
from controlpanel.jobs.models import Job
from controlpanel.jobs.presets import ENTRY_POINT, MAIN_PARAMS, finetune_command
from tests.fixtures.cli import cli_as, ok_json
from training.options import Options, parse_options

pytestmark = pytest.mark.django_db(transaction=True)


def options_of(job: Job) -> Options:
    """What the fine-tune entry point runs with: the command the job's params make."""
    argv = finetune_command(params=job.params)
    assert argv[: len(ENTRY_POINT)] == ENTRY_POINT
    return parse_options(argv[len(ENTRY_POINT) :])


def submitted_as_the_form_starts(client: Client, model: str, data: str, output: str) -> Job:
    """GET the form, post back every field at its initial value, the volumes filled in."""
    page = client.get("/p/alpha/jobs/new/")
    assert page.status_code == 200
    form = page.context["finetune"]
    posted: dict[str, Any] = {"tab": "finetune"}
    for name in form.fields:
        value = form[name].value()
        if value not in (None, "", False):
            posted[f"ft-{name}"] = value
    posted |= {"ft-model_volume": model, "ft-data_volume": data, "ft-output_volume": output}
    answer = client.post("/p/alpha/jobs/new/", posted)
    assert answer.status_code == 302, (posted, answer.context["finetune"].errors)
    return Job.objects.get(pk=answer["Location"].rstrip("/").rsplit("/", 1)[-1])


def test_a_finetune_from_the_cli_runs_as_one_from_the_form_left_at_its_defaults(
    live_server: Any, owner: Any, owner_client: Client, data_bucket: Bucket
) -> None:
    bucket = data_bucket.name
    model, data, output = (f"{bucket}@LOCAL/{p}" for p in ("tiny-llama", "chat", "runs"))
    from_form = submitted_as_the_form_starts(owner_client, model, data, output)
    made = ok_json(
        cli_as(owner, live_server.url)(
            "job",
            "run",
            "--preset",
            "finetune",
            "--volume",
            f"{model}:/workspace/model:ro",
            "--volume",
            f"{data}:/workspace/data:ro",
            "--volume",
            f"{output}:/workspace/output:rw",
            "-o",
            "json",
        )
    )
    from_cli = Job.objects.get(pk=made["id"])
    same = ("flavor_id", "gpu", "nodes", "timeout", "preemptible", "preset", "image", "volumes")
    assert {k: getattr(from_cli, k) for k in same} == {k: getattr(from_form, k) for k in same}
    assert options_of(from_cli) == options_of(from_form)


def test_the_forms_initial_hyper_parameters_are_the_entry_points_defaults(
    owner_client: Client,
) -> None:
    form = owner_client.get("/p/alpha/jobs/new/").context["finetune"]
    shown = {name: form[name].value() for name in MAIN_PARAMS}
    defaults = parse_options(["--model", "m", "--data", "d", "--output", "o"]).as_dict()
    assert shown == {name: defaults[name] for name in MAIN_PARAMS}
    assert set(MAIN_PARAMS) <= set(form.fields)
