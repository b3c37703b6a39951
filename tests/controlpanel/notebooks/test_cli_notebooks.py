"""`ajuste notebook ...` against a live panel with a real token: the job run's flags, errors
that name the flag, the lifecycle commands, logs with --follow and -o json."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.engine.models import JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.auth import notebook_token
from controlpanel.notebooks.cli import NOTEBOOK_STATES
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from tests.fixtures.cli import cli_as, ok_json

pytestmark = pytest.mark.django_db(transaction=True)
N = NotebookState


@pytest.fixture
def run(live_server: Any, owner: Any, panel_s3: Any, settings: Any) -> Any:
    settings.COMPUTE_BACKEND = "kubernetes"  # rows only: nothing here reaches a backend
    return cli_as(owner, live_server.url)


def make(project: Any, owner: Any, name: str = "nb", **fields: Any) -> Notebook:
    return Notebook.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="x/nb:1",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        params={"image": "python"},
        **fields,
    )


def test_run_takes_the_job_flags_and_the_editors(run: Any, data_bucket: Bucket) -> None:
    spec = f"{data_bucket.name}@LOCAL/dataset:/workspace/data:ro"
    created = ok_json(
        run(
            "notebook",
            "run",
            "--image",
            "python",
            "--editor",
            "jupyterlab",
            "--gpu",
            "2",
            "--flavor",
            "h100-1-gpu",
            "--volume",
            spec,
            "--env",
            "SEED=1",
            "--label",
            "team=nlp",
            "--name",
            "explore",
            "-o",
            "json",
        )
    )
    assert (created["state"], created["gpu"], created["flavor"]) == ("STARTING", 2, "h100-1-gpu")
    assert (created["image"], created["editor"], created["name"]) == (
        "python",
        "jupyterlab",
        "explore",
    )
    assert (created["volumes"], created["env"], created["labels"]) == (
        [spec],
        {"SEED": "1"},
        {"team": "nlp"},
    )
    listed = ok_json(run("notebook", "list", "-o", "json"))
    assert [n["id"] for n in listed] == [created["id"]]
    got = ok_json(run("notebook", "get", created["id"][:8], "-o", "json"))
    assert got["history"][0]["state"] == "STARTING"
    table = run("notebook", "get", created["id"][:8])
    assert table.exit_code == 0 and "explore" in table.output and "STARTING" in table.output
    assert "open: http" in table.output and "/notebooks/" in table.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image", "cobol"], "HTTP 400: --image: Unknown image 'cobol'"),
        (["--volume", "bad"], "--volume 1: 'bad' at character 4"),
        (["--env", "JUPYTER_TOKEN=x"], "--env JUPYTER_TOKEN: JUPYTER_TOKEN is reserved"),
        (["--env", "NOEQUALS"], "'NOEQUALS' is not KEY=VALUE"),
        (["--flavor", "nope"], "--flavor: Unknown flavor 'nope'"),
        (["--gpu", "9", "--flavor", "h100-1-gpu"], "--gpu: "),
        (["--editor", "emacs"], "'emacs' is not one of 'jupyterlab', 'vscode'"),
    ],
)
def test_bad_flags_say_which_flag(run: Any, args: list[str], message: str) -> None:
    result = run("notebook", "run", *args)
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert not Notebook.objects.exists()


def test_stop_start_keep_alive_delete(run: Any, project: Any, owner: Any) -> None:
    notebook = make(project, owner, state=N.STARTING)
    key = str(notebook.pk)
    stopped = ok_json(run("notebook", "stop", key[:8], "-o", "json"))
    assert stopped["state"] == "STOPPED"  # never launched: stopped at once
    started = ok_json(run("notebook", "start", key, "-o", "json"))
    assert (started["state"], started["run"]) == ("STARTING", 2)
    refused = run("notebook", "keep-alive", key)
    assert refused.exit_code == 1 and "HTTP 400: The notebook is STARTING, not running." in (
        refused.output
    )
    deleted = run("notebook", "delete", key)
    assert deleted.exit_code == 0 and "Deleting" in deleted.output
    assert not Notebook.objects.exists()  # never launched: the row goes at once
    missing = run("notebook", "get", "deadbeef")
    assert missing.exit_code == 1 and "no notebook 'deadbeef'" in missing.output


def test_list_by_state_any_case(run: Any, project: Any, owner: Any) -> None:
    make(project, owner, "up", state=N.RUNNING)
    make(project, owner, "down", state=N.STOPPED)
    listed = ok_json(run("notebook", "list", "--state", "running", "-o", "json"))
    assert [n["name"] for n in listed] == ["up"]
    table = run("notebook", "list")
    assert table.exit_code == 0 and "down" in table.output and "EDITOR" in table.output


def test_logs_follow_ends_with_the_final_state(run: Any, project: Any, owner: Any) -> None:
    notebook = make(project, owner, state=N.STOPPED, logs_archived=True, log_lines=2)
    JobLogLine.objects.bulk_create(
        JobLogLine(job=notebook, run=1, seq=i, text=f"[I ServerApp] {i}") for i in (1, 2)
    )
    result = run("notebook", "logs", "--follow", str(notebook.pk))
    assert result.stdout.splitlines() == ["[I ServerApp] 1", "[I ServerApp] 2"]
    assert result.stderr == f"notebook {str(notebook.pk)[:8]} run 1 ended: STOPPED\n"
    assert result.exit_code == 0
    as_json = run("notebook", "logs", "--after", "1", "-o", "json", str(notebook.pk))
    assert [json.loads(x) for x in as_json.stdout.splitlines()] == [
        {"seq": 2, "text": "[I ServerApp] 2"}
    ]
    Notebook.objects.filter(pk=notebook.pk).update(state=N.FAILED, state_reason="OOMKilled")
    failed = run("notebook", "logs", "-f", str(notebook.pk))
    assert failed.exit_code == 3 and "ended: FAILED: OOMKilled" in failed.stderr


def test_the_editor_token_is_never_printed(run: Any, project: Any, owner: Any) -> None:
    notebook = make(project, owner, state=N.RUNNING)
    token = notebook_token(notebook)
    Notebook.objects.filter(pk=notebook.pk).update(url=f"http://127.0.0.1:9/nb/?token={token}")
    for args in (["get", str(notebook.pk)], ["get", str(notebook.pk), "-o", "json"], ["list"]):
        result = run("notebook", *args)
        assert result.exit_code == 0 and token not in result.output


def test_cli_state_names_are_the_models() -> None:
    assert list(NOTEBOOK_STATES) == NotebookState.values
