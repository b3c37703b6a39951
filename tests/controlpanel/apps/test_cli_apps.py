"""`ajuste app ...` against a live panel with a real token: create with its model, adapter,
scaling and env flags, errors that name the flag, list/show/url, the lifecycle commands."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.engine.models import JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project, ProjectSecret
from controlpanel.served.cli import APP_STATES
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from tests.fixtures.cli import cli_as, ok_json

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(live_server: Any, owner: Any, panel_s3: Any, settings: Any) -> Any:
    settings.COMPUTE_BACKEND = "kubernetes"  # rows only: nothing here reaches a backend
    settings.APP_KEDA = True
    return cli_as(owner, live_server.url)


def make(project: Project, owner: Any, name: str = "chat", **fields: Any) -> App:
    return App.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": name},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        **fields,
    )


def test_create_takes_the_model_scaling_env_and_secret_flags(run: Any, data_bucket: Bucket) -> None:
    model = f"{data_bucket.name}@LOCAL/tiny-llama"
    adapter = f"{data_bucket.name}@LOCAL/runs/1/adapter"
    created = ok_json(
        run(
            "app",
            "create",
            "--model",
            model,
            "--adapter",
            adapter,
            "--name",
            "tiny chat",
            "--units",
            "2",
            "--flavor",
            "h100-1-gpu",
            "--min",
            "0",
            "--max",
            "3",
            "--target-rps",
            "5",
            "--public",
            "--env",
            "SEED=1",
            "--label",
            "team=nlp",
            "-o",
            "json",
        )
    )
    assert (created["state"], created["gpu"], created["flavor"]) == ("QUEUED", 2, "h100-1-gpu")
    config = created["config"]
    assert (config["model"], config["adapter"], config["model_name"]) == (
        model,
        adapter,
        "tiny-chat",
    )
    assert (config["scaling"], config["min_replicas"], config["max_replicas"]) == ("rps", 0, 3)
    assert (config["target_rps"], config["public"]) == (5, True)
    assert (created["env"], created["labels"]) == ({"SEED": "1"}, {"team": "nlp"})
    key = created["id"]

    listed = ok_json(run("app", "list", "-o", "json"))
    assert [a["id"] for a in listed] == [key]
    table = run("app", "list")
    assert table.exit_code == 0 and "tiny chat" in table.output and "0/0" in table.output
    assert "public" in table.output and "REPLICAS" in table.output
    shown = run("app", "show", key[:8])
    assert shown.exit_code == 0, shown.output
    assert f"url: {created['url']}" in shown.output
    assert "scaling: 0 to 3 replicas at 5 requests/s each" in shown.output
    assert "QUEUED" in shown.output and "created" in shown.output  # the history
    assert ok_json(run("app", "get", key, "-o", "json"))["history"][0]["state"] == "QUEUED"
    url = run("app", "url", key[:8])
    assert (url.exit_code, url.stdout) == (0, created["url"] + "\n")
    assert ok_json(run("app", "url", key, "-o", "json")) == {"id": key, "url": created["url"]}


def test_fixed_replicas_and_a_secret_reference(
    run: Any, data_bucket: Bucket, project: Project
) -> None:
    ProjectSecret.objects.create(project=project, name="hf", value="hf_x")
    created = ok_json(
        run(
            "app",
            "create",
            "--model",
            f"{data_bucket.name}@LOCAL/tiny-llama",
            "--replicas",
            "2",
            "--secret",
            "HF_TOKEN=hf",
            "-o",
            "json",
        )
    )
    assert created["env"] == {"HF_TOKEN": "secret:hf"}
    assert (created["config"]["scaling"], created["config"]["max_replicas"]) == ("fixed", 2)
    assert created["config"]["public"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Missing option '--model'"),
        (["--model", "nobucket@LOCAL/m"], "--model: "),
        (["--model", "{b}@LOCAL/m", "--adapter", "x:y"], "--adapter: Give a bucket path"),
        (["--model", "{b}@LOCAL/m", "--replicas", "11"], "--replicas: From 1 to 10."),
        (["--model", "{b}@LOCAL/m", "--min", "3", "--max", "2", "--target-cpu", "50"], "--max: "),
        (["--model", "{b}@LOCAL/m", "--min", "1"], "Autoscaling needs a target"),
        (["--model", "{b}@LOCAL/m", "--replicas", "2", "--max", "3"], "not both"),
        (["--model", "{b}@LOCAL/m", "--target-cpu", "5", "--target-rps", "5"], "one target"),
        (["--model", "{b}@LOCAL/m", "--units", "9", "--flavor", "h100-1-gpu"], "--units: "),
        (["--model", "{b}@LOCAL/m", "--secret", "K=nosuch"], "--env K: "),
        (["--model", "{b}@LOCAL/m", "--env", "NOEQUALS"], "'NOEQUALS' is not KEY=VALUE"),
        (["--model", "{b}@LOCAL/m", "--volume", "{b}@LOCAL/x:/workspace/x:rw"], "--volume 1: "),
        (["--model", "{b}@LOCAL/m", "--model-name", "bad name!"], "--model-name: "),
        (
            ["--model", "{b}@LOCAL/m", "--image", "evil.example.com/x:1"],
            "--image: evil.example.com/x:1 is not on this site's list of app images",
        ),
    ],
)
def test_bad_flags_say_which_flag(
    run: Any, data_bucket: Bucket, args: list[str], message: str
) -> None:
    result = run("app", "create", *[a.format(b=data_bucket.name) for a in args])
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert not App.objects.exists()


def test_stop_start_delete_and_unknown_ids(run: Any, project: Project, owner: Any) -> None:
    app = make(project, owner, state=AppState.QUEUED)
    key = str(app.pk)
    stopped = ok_json(run("app", "stop", key[:8], "-o", "json"))
    assert stopped["state"] == "STOPPED"  # never admitted: stopped at once
    again = run("app", "stop", key)
    assert again.exit_code == 1 and "HTTP 400: The app is STOPPED: there is nothing to stop." in (
        again.output
    )
    started = run("app", "start", key)
    assert started.exit_code == 0 and "QUEUED" in started.output
    assert App.objects.get(pk=app.pk).run == 2
    deleted = run("app", "delete", key)
    assert deleted.exit_code == 0 and f"Deleting {key[:8]}." in deleted.output
    assert not App.objects.exists()  # never launched: the row goes at once
    missing = run("app", "show", "deadbeef")
    assert missing.exit_code == 1 and "no app 'deadbeef'" in missing.output


def test_list_by_state_and_logs(run: Any, project: Project, owner: Any) -> None:
    make(project, owner, "up", state=AppState.RUNNING)
    down = make(project, owner, "down", state=AppState.STOPPED, logs_archived=True, log_lines=1)
    listed = ok_json(run("app", "list", "--state", "running", "-o", "json"))
    assert [a["name"] for a in listed] == ["up"]
    JobLogLine.objects.create(job=down, run=1, seq=1, text="INFO: Uvicorn running")
    logs = run("app", "logs", "--follow", str(down.pk))
    assert logs.stdout == "INFO: Uvicorn running\n" and logs.exit_code == 0
    assert logs.stderr == f"app {str(down.pk)[:8]} run 1 ended: STOPPED\n"


def test_cli_state_names_are_the_models() -> None:
    assert list(APP_STATES) == AppState.values
