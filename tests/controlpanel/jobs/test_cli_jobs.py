"""`ajuste job ...` and `ajuste flavor list` against a live panel with a real token."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.engine.models import JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.cli import JOB_STATES
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from tests.fixtures.cli import cli_as, ok_json
from tests.fixtures.jobs import put_dataset

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(live_server: Any, owner: Any, panel_s3: Any) -> Any:
    return cli_as(owner, live_server.url)


def test_job_run_takes_the_ovhai_flags(run: Any, data_bucket: Bucket, k8s_jobs: Any) -> None:
    spec = f"{data_bucket.name}@LOCAL/dataset:/workspace/data:ro"
    job = ok_json(
        run(
            "job",
            "run",
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
            "--timeout",
            "3600",
            "--name",
            "bert",
            "-o",
            "json",
            "my-registry/train:latest",
            "--",
            "python",
            "train.py",
            "--lr",
            "3e-4",
            "--note",
            "a b; rm -rf /",
        )
    )
    assert job["state"] == "QUEUED" and job["gpu"] == 2 and job["flavor"] == "h100-1-gpu"
    assert job["command"] == ["python", "train.py", "--lr", "3e-4", "--note", "a b; rm -rf /"]
    assert (job["env"], job["labels"], job["timeout"]) == ({"SEED": "1"}, {"team": "nlp"}, 3600)
    assert job["volumes"] == [spec]
    listed = ok_json(run("job", "list", "-o", "json"))
    assert [j["id"] for j in listed] == [job["id"]]
    got = ok_json(run("job", "get", job["id"][:8], "-o", "json"))
    assert got["history"][0]["state"] == "QUEUED"
    table = run("job", "list")
    assert table.exit_code == 0 and "bert" in table.output and "QUEUED" in table.output


def test_preset_params_and_lifecycle(run: Any, data_bucket: Bucket, panel_s3: Any) -> None:
    b = data_bucket.name
    put_dataset(panel_s3, b, "data")
    job = ok_json(
        run(
            "job",
            "run",
            "--preset",
            "finetune",
            "--param",
            "max_steps=5",
            "--param",
            "base_model=org/tiny",
            "--volume",
            f"{b}@LOCAL/data:/workspace/data",
            "--volume",
            f"{b}@LOCAL/out:/workspace/output:rw",
            "-o",
            "json",
        )
    )
    assert job["preset"] == "finetune" and job["params"] == {
        "max_steps": 5,
        "base_model": "org/tiny",
    }
    stopped = ok_json(run("job", "stop", job["id"], "-o", "json"))
    assert stopped["state"] == "INTERRUPTED"  # never launched: stopped at once
    rerun = ok_json(run("job", "rerun", job["id"], "-o", "json"))
    assert (rerun["state"], rerun["run"]) == ("QUEUED", 2)
    Job.objects.filter(pk=job["id"]).update(state=JobState.FAILED)
    deleted = run("job", "delete", job["id"])
    assert deleted.exit_code == 0 and "Deleted" in deleted.output
    assert not Job.objects.exists()


def test_logs_prints_the_archived_log(run: Any, owner: Any, project: Any) -> None:
    job = Job.objects.create(
        project=project,
        owner=owner,
        name="j",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=JobState.DONE,
        logs_archived=True,
        log_lines=3,
    )
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, run=1, seq=i, text=f"line {i} <ok>") for i in (1, 2, 3)
    )
    result = run("job", "logs", "--follow", str(job.pk))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["line 1 <ok>", "line 2 <ok>", "line 3 <ok>"]
    assert result.stderr == f"job {str(job.pk)[:8]} run 1 ended: DONE\n"


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"state": JobState.FAILED, "exit_code": 2, "state_reason": "boom"},
            "FAILED (exit code 2): boom",
        ),
        (
            {"state": JobState.INTERRUPTED, "state_reason": "stopped by owner"},
            "INTERRUPTED: stopped by owner",
        ),
        ({"state": JobState.DONE, "exit_code": 0}, "DONE (exit code 0)"),
    ],
)
def test_logs_follow_ends_with_the_final_state_and_its_exit_status(
    run: Any, owner: Any, project: Any, fields: dict[str, Any], said: str
) -> None:
    job = make_job(project, owner, "j", logs_archived=True, log_lines=1, **fields)
    JobLogLine.objects.create(job=job, run=1, seq=1, text="last words")
    result = run("job", "logs", "-f", str(job.pk))
    assert result.stdout == "last words\n"
    assert result.stderr == f"job {str(job.pk)[:8]} run 1 ended: {said}\n"
    assert result.exit_code == (0 if fields["state"] == JobState.DONE else 3)
    plain = run("job", "logs", str(job.pk))  # without --follow: the log only, status 0
    assert (plain.exit_code, plain.stderr) == (0, "")


def test_logs_follow_reports_an_earlier_run_from_the_history() -> None:
    from controlpanel.cli.workloads import run_outcome

    job = {
        "id": "0123456789",
        "run": 2,
        "state": "QUEUED",
        "exit_code": None,
        "history": [
            {"run": 1, "state": "RUNNING", "reason": ""},
            {"run": 1, "state": "ERROR", "reason": "node lost"},
            {"run": 2, "state": "QUEUED", "reason": "run again"},
        ],
    }
    assert run_outcome(job, 1) == ("ERROR", "job 01234567 run 1 ended: ERROR: node lost")


def test_logs_help_documents_the_exit_codes(run: Any) -> None:
    text = run("job", "logs", "--help").output
    assert "0    DONE" in text and "3    it ended otherwise" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job", "run", "--env", "NOEQUALS", "x/y:1"], "'NOEQUALS' is not KEY=VALUE"),
        (["job", "run", "--gpu", "13", "--flavor", "ai1-1-cpu", "x/y:1"], "--gpu: "),
        (["job", "run", "--flavor", "nope", "x/y:1"], "Unknown flavor 'nope'"),
        (["job", "run", "--volume", "bad", "x/y:1"], "--volume 1: 'bad' at character 4"),
        (["job", "run", "--env", "AWS_X=1", "x/y:1"], "--env AWS_X: AWS_X is reserved"),
        (["job", "run"], "Give an IMAGE"),
        (["job", "get", "deadbeef"], "no job 'deadbeef'"),
    ],
)
def test_bad_flags_say_what_is_wrong(run: Any, args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert not Job.objects.exists()


def test_flavor_list(run: Any) -> None:
    flavors = ok_json(run("flavor", "list", "-o", "json"))
    assert {"ai1-1-cpu", "h100-1-gpu", "h200-1-gpu"} <= {f["name"] for f in flavors}
    table = run("flavor", "list")
    assert "1x H100" in table.output and "2.8000" in table.output


def make_job(project: Any, owner: Any, name: str, **fields: Any) -> Job:
    flavor = Flavor.objects.get(name="ai1-1-cpu")
    return Job.objects.create(
        project=project, owner=owner, name=name, image="x/y:1", flavor=flavor, **fields
    )


def test_cli_state_names_are_the_models() -> None:
    assert list(JOB_STATES) == JobState.values


def test_list_state_is_a_case_insensitive_choice(run: Any, owner: Any, project: Any) -> None:
    make_job(project, owner, "queued")
    make_job(project, owner, "running", state=JobState.RUNNING)
    listed = ok_json(run("job", "list", "--state", "running", "-o", "json"))
    assert [j["name"] for j in listed] == ["running"]
    bogus = run("job", "list", "--state", "bogus")
    assert bogus.exit_code == 2
    assert "'bogus' is not one of" in bogus.output and "'sync_failed'" in bogus.output


def test_list_by_label(run: Any, owner: Any, project: Any) -> None:
    """Answered 500 on the embedded SQLite (tests/controlpanel/test_sqlite.py runs it there)."""
    make_job(project, owner, "nlp", labels={"team": "nlp"})
    make_job(project, owner, "cv", labels={"team": "cv"})
    for label, names in [("team=nlp", ["nlp"]), ("team", ["cv", "nlp"]), ("team=x", [])]:
        listed = ok_json(run("job", "list", "--label", label, "-o", "json"))
        assert sorted(j["name"] for j in listed) == names


def test_a_custom_image_on_the_local_backend_is_refused_with_the_reason(run: Any) -> None:
    result = run("job", "run", "--flavor", "ai1-1-cpu", "x/y:1", "--", "python", "t.py")
    assert result.exit_code == 1
    assert "HTTP 400: IMAGE: x/y:1 cannot run here. Custom images need the Kubernetes" in (
        result.output
    )
    assert not Job.objects.exists()


def test_list_bad_label_says_why(run: Any) -> None:
    result = run("job", "list", "--label", "a__regex=(")
    assert result.exit_code == 1
    assert "HTTP 400: label: Bad label filter 'a__regex=('" in result.output


def test_logs_json_is_one_object_per_line(run: Any, owner: Any, project: Any) -> None:
    job = make_job(project, owner, "j", state=JobState.DONE, logs_archived=True, log_lines=2)
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, run=1, seq=i, text=f'line {i} "é"') for i in (1, 2)
    )
    for args in (["-o", "json"], ["--follow", "-o", "json"], ["--after", "1", "-o", "json"]):
        result = run("job", "logs", *args, str(job.pk))
        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        first = 2 if "--after" in args else 1
        assert lines == [{"seq": i, "text": f'line {i} "é"'} for i in range(first, 3)]
    global_flag = run("-o", "json", "job", "logs", str(job.pk))
    assert json.loads(global_flag.stdout.splitlines()[0]) == {"seq": 1, "text": 'line 1 "é"'}


def test_retry_push(run: Any, owner: Any, project: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from controlpanel.jobs import tasks as job_tasks

    sent: list[str] = []
    monkeypatch.setattr(job_tasks.job_retry_push, "delay_on_commit", sent.append)
    job = make_job(project, owner, "j", state=JobState.SYNC_FAILED)
    body = ok_json(run("job", "retry-push", str(job.pk)[:8], "-o", "json"))
    assert body["state"] == "FINALIZING" and sent == [str(job.pk)]
    again = run("job", "retry-push", str(job.pk))
    assert again.exit_code == 1 and "SYNC_FAILED" in again.output
