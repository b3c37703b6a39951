"""`ajuste sweep run|list|get|stop` against a live panel with a real token: the flags make the
same sweep as the API's body, a short id finds it, stop ends it, and a bad flag is refused
naming it with nothing made."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.projects.models import Project
from controlpanel.sweeps.models import Sweep
from tests.fixtures.cli import cli_as, ok_json

pytestmark = pytest.mark.django_db(transaction=True)

BUCKET = "alpha-data"


@pytest.fixture
def run(live_server: Any, owner: Any, project: Project, panel_s3: Any) -> Any:
    Bucket.objects.get_or_create(project=project, datastore="LOCAL", name=BUCKET)
    return cli_as(owner, live_server.url)


def sweep_args(*extra: str) -> list[str]:
    return [
        "sweep",
        "run",
        "--name",
        "lr-rank",
        "--flavor",
        "ai1-1-cpu",
        "--volume",
        f"{BUCKET}@LOCAL/chat:/workspace/data",
        "--volume",
        f"{BUCKET}@LOCAL/runs/s1:/workspace/output:rw",
        "--param",
        "base_model=org/tiny",
        "--param",
        "max_steps=10",
        "--space",
        "learning_rate=1e-6,1e-3",
        "--space",
        "rank=4..16",
        "--sampler",
        "random",
        "--pruner",
        "median",
        "--trials",
        "4",
        "--parallel",
        "2",
        "--seed",
        "7",
        *extra,
    ]


def test_run_list_get_and_stop_a_sweep(run: Any) -> None:
    made = ok_json(run(*sweep_args("--max-cost", "5", "-o", "json")))
    sweep = Sweep.objects.get(pk=made["id"])
    assert (sweep.name, sweep.sampler, sweep.pruner) == ("lr-rank", "random", "median")
    assert (sweep.max_trials, sweep.parallel, sweep.seed) == (4, 2, 7)
    assert sweep.space == {
        "learning_rate": {"values": [1e-6, 1e-3]},
        "rank": {"low": 4, "high": 16, "log": False},
    }
    assert sweep.base["params"] == {"base_model": "org/tiny", "max_steps": 10}
    listed = ok_json(run("sweep", "list", "-o", "json"))
    assert [s["id"] for s in listed] == [made["id"]]
    table = run("sweep", "list")
    assert table.exit_code == 0 and "lr-rank" in table.output and made["id"][:8] in table.output
    got = ok_json(run("sweep", "get", made["id"][:8], "-o", "json"))
    assert got["id"] == made["id"] and got["max_trials"] == 4
    stopped = ok_json(run("sweep", "stop", made["id"][:8], "-o", "json"))
    assert stopped["state"] == "STOPPED"
    again = run("sweep", "stop", made["id"])
    assert again.exit_code != 0


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--space", "rank"), "NAME=V1,V2"),
        (("--param", "max_steps"), "K=V"),
        (("--sampler", "bayes"), "--sampler"),
    ],
)
def test_a_bad_flag_names_itself_and_makes_nothing(
    run: Any, extra: tuple[str, ...], said: str
) -> None:
    result = run(*sweep_args(*extra))
    assert result.exit_code != 0
    assert said in result.output
    assert not Sweep.objects.exists()
