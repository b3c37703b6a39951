"""Issue 32: the flavor list says which flavors can run where the panel runs workloads.
`GET /api/v1/flavors/` gives each flavor `runs_here` and `why_not` (the very sentence a
submission with it is refused with, machine_fit's); `ajuste flavor list` shows a HERE column
and, under the table, why the others cannot run here. On Kubernetes the cluster decides: every
flavor runs here."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlpanel.jobs.models import Job
from tests.fixtures.cli import cli_as, ok_json
from tests.fixtures.jobs import H100_NAME

pytestmark = pytest.mark.django_db

NO_GPU = (
    "This panel runs workloads on this machine, which has no GPU; choose a CPU flavor such as "
    "ai1-1-cpu."
)
NO_L4 = (
    "This panel runs workloads on this machine, which has no L4 GPU (it has 8 × "
    f"{H100_NAME}); choose h100-1-gpu, or a CPU flavor such as ai1-1-cpu."
)
GPU_FLAVORS = ["l4-1-gpu", "v100s-1-gpu", "a100-1-gpu", "l40s-1-gpu", "h100-1-gpu", "h200-1-gpu"]


def listed(api: APIClient) -> dict[str, dict[str, Any]]:
    answer = api.get("/api/v1/flavors/")
    assert answer.status_code == 200, answer.content
    return {row["name"]: row for row in answer.json()}


def test_the_api_says_a_machine_without_gpus_runs_only_cpu_flavors(
    owner_api: APIClient, cpu_machine: Any
) -> None:
    flavors = listed(owner_api)
    assert flavors["ai1-1-cpu"]["runs_here"] is True
    assert flavors["ai1-1-cpu"]["why_not"] is None
    for name in GPU_FLAVORS:
        assert (flavors[name]["runs_here"], flavors[name]["why_not"]) == (False, NO_GPU), name
    one = owner_api.get("/api/v1/flavors/h100-1-gpu/").json()
    assert (one["runs_here"], one["why_not"]) == (False, NO_GPU)


def test_why_not_is_the_sentence_a_submission_is_refused_with(
    owner_api: APIClient, gpu_machine: Any
) -> None:
    flavors = listed(owner_api)
    assert flavors["h100-1-gpu"]["runs_here"] is True
    assert flavors["h100-1-gpu"]["why_not"] is None
    assert (flavors["l4-1-gpu"]["runs_here"], flavors["l4-1-gpu"]["why_not"]) == (False, NO_L4)
    body = {"image": "x/y:1", "command": ["python"], "flavor": "l4-1-gpu"}
    refused = owner_api.post("/api/v1/jobs/?project=alpha", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["flavor"] == [flavors["l4-1-gpu"]["why_not"]]
    assert not Job.objects.exists()


def test_on_kubernetes_every_flavor_runs_here(owner_api: APIClient, k8s_jobs: Any) -> None:
    flavors = listed(owner_api)
    assert {name: (row["runs_here"], row["why_not"]) for name, row in flavors.items()} == {
        name: (True, None) for name in flavors
    }
    assert set(GPU_FLAVORS) <= set(flavors)


def here_column(output: str) -> dict[str, str]:
    """The HERE cell of each row of the table (its last column), by flavor name."""
    lines = output.splitlines()
    assert lines[0].split()[-1] == "HERE", output
    rows = [line.split() for line in lines[1:] if line and " cannot run here: " not in line]
    return {cells[0]: cells[-1] for cells in rows}


@pytest.mark.django_db(transaction=True)
def test_the_cli_marks_what_cannot_run_on_a_machine_without_gpus(
    live_server: Any, owner: Any, cpu_machine: Any
) -> None:
    run = cli_as(owner, live_server.url)
    table = run("flavor", "list")
    assert table.exit_code == 0, table.output
    here = here_column(table.output)
    assert here["ai1-1-cpu"] == "yes"
    assert all(here[name] == "no" for name in GPU_FLAVORS), here
    assert f"{', '.join(GPU_FLAVORS)} cannot run here: {NO_GPU}" in table.output.splitlines()
    rows = {row["name"]: row for row in ok_json(run("flavor", "list", "-o", "json"))}
    assert (rows["h200-1-gpu"]["runs_here"], rows["h200-1-gpu"]["why_not"]) == (False, NO_GPU)
    assert rows["ai1-1-cpu"]["runs_here"] is True


@pytest.mark.django_db(transaction=True)
def test_the_cli_names_the_gpu_models_a_machine_lacks(
    live_server: Any, owner: Any, gpu_machine: Any
) -> None:
    table = cli_as(owner, live_server.url)("flavor", "list")
    here = here_column(table.output)
    assert here["h100-1-gpu"] == "yes" and here["ai1-1-cpu"] == "yes"
    assert here["l4-1-gpu"] == "no" and here["h200-1-gpu"] == "no"
    assert f"l4-1-gpu cannot run here: {NO_L4}" in table.output.splitlines()
    cannot = [line.split(" cannot run here: ")[0] for line in table.output.splitlines()]
    assert cannot[-5:] == ["l4-1-gpu", "v100s-1-gpu", "a100-1-gpu", "l40s-1-gpu", "h200-1-gpu"]


@pytest.mark.django_db(transaction=True)
def test_the_cli_on_kubernetes_marks_nothing(live_server: Any, owner: Any, k8s_jobs: Any) -> None:
    table = cli_as(owner, live_server.url)("flavor", "list")
    assert table.exit_code == 0, table.output
    assert set(here_column(table.output).values()) == {"yes"}
    assert "cannot run here" not in table.output
