"""`python -m storage.sync` as deploy/ runs it: subprocesses, JSON lines, exit codes, on two S3
servers (the embedded s3rver and moto, tests/fixtures/s3.py)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from storage.datastore import DatastoreConfig
from storage.objects import iter_objects, put_object, read_object
from storage.sync.cli import main, summary_text
from tests.fixtures.s3 import S3_SERVERS, SIGNATURES_CHECKED, each_s3_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def run_sync(
    config: DatastoreConfig | None, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storage.sync", *args],
        cwd=REPO,
        env=_env(config),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _env(config: DatastoreConfig | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJUSTE_DATASTORE_")}
    return {**env, **(config.to_env() if config else {})}


def lines(stdout: str) -> list[dict[str, Any]]:
    """The result and skip lines (progress comes at most once a second; summaries apart)."""
    parsed = [json.loads(line) for line in stdout.splitlines()]
    assert all(line["event"] in ("progress", "result", "skip", "push") for line in parsed)
    return [line for line in parsed if line["event"] in ("result", "skip")]


def summaries(stdout: str) -> list[dict[str, Any]]:
    """The push summary lines, one per push of every volume."""
    parsed = [json.loads(line) for line in stdout.splitlines()]
    return [line for line in parsed if line["event"] == "push"]


@contextmanager
def sync_process(config: DatastoreConfig, *args: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "storage.sync", *args],
        cwd=REPO,
        env=_env(config),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


def next_result(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    while True:
        line = json.loads(process.stdout.readline())
        if line["event"] == "result":
            return line


def test_pull_then_push_round_trip(s3_server: DatastoreConfig, bucket: str, tmp_path: Path) -> None:
    put_object(s3_server, bucket=bucket, key="dataset/train.jsonl", data=b'{"a": 1}\n')
    put_object(s3_server, bucket=bucket, key="dataset/sub/ü.txt", data=b"u")
    data = f"{bucket}@LOCAL/dataset:/workspace/data:ro"
    output = f"{bucket}@LOCAL/output:/workspace/output:rw"
    pulled = run_sync(s3_server, "pull", data, output, "--root", str(tmp_path), "--workers", "2")
    assert pulled.returncode == 0, pulled.stderr
    results = [line for line in lines(pulled.stdout) if line["event"] == "result"]
    assert [r["spec"] for r in results] == [data, output]
    assert results[0]["transferred"] == 2
    assert results[0]["local_dir"] == str(tmp_path / "workspace/data")
    assert results[0]["failures"] == []
    assert results[1]["total"] == 0
    assert (tmp_path / "workspace/data/sub/ü.txt").read_bytes() == b"u"

    (tmp_path / "workspace/output/model.bin").write_bytes(b"weights")
    (tmp_path / "workspace/data/new.txt").write_bytes(b"never pushed: ro")
    pushed = run_sync(s3_server, "push", data, output, "--root", str(tmp_path))
    assert pushed.returncode == 0, pushed.stderr
    skip, result = lines(pushed.stdout)
    assert (skip["event"], skip["spec"], skip["reason"]) == ("skip", data, "read-only volume")
    # model.bin, and the lineage the pull wrote there (storage/sync/lineage.py)
    assert (result["event"], result["transferred"], result["final"]) == ("result", 2, True)
    assert set(result) >= {
        "total",
        "processed",
        "failed",
        "skipped",
        "deleted",
        "transferred_bytes",
        "direction",
    }
    keys = [info.key for info in iter_objects(s3_server, bucket=bucket)]
    # The lineage the pull wrote into the output volume went up with the run's work.
    assert keys == [
        "dataset/sub/ü.txt",
        "dataset/train.jsonl",
        "output/.ajuste/lineage.json",
        "output/model.bin",
    ]


def test_failed_files_exit_1_and_are_listed(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    deep = tmp_path.joinpath("workspace", "out", *["d" * 200] * 6)
    deep.mkdir(parents=True)
    (deep / "x").write_bytes(b"x")
    (tmp_path / "workspace/out/ok").write_bytes(b"ok")
    progress_file = tmp_path / "progress.json"
    spec = f"{bucket}@LOCAL:/workspace/out:rwd"
    pushed = run_sync(
        s3_server, "push", spec, "--root", str(tmp_path), "--progress-file", str(progress_file)
    )
    assert pushed.returncode == 1
    [result] = lines(pushed.stdout)
    assert (result["transferred"], result["failed"]) == (1, 1)
    assert "S3 allows 1024" in result["failures"][0]["error"]
    named = pushed.stderr.splitlines()
    assert named[0] == "python -m storage.sync: 1 file(s) not transferred:"
    assert named[1].startswith("  " + "d" * 200 + "/") and "S3 allows 1024" in named[1]
    document = json.loads(progress_file.read_text())
    assert document["direction"] == "push"
    assert [volume["event"] for volume in document["volumes"]] == ["result"]
    assert document["volumes"][0]["failures"] == result["failures"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pull", "Bad@LOCAL:/workspace/x", "--root", "/tmp"], "uppercase letter 'B'"),
        (["pull", "abc@LOCAL:/etc", "--root", "/tmp"], "outside /workspace"),
        (
            ["pull", "abc@LOCAL:/workspace/a", "abd@LOCAL:/workspace/a/b", "--root", "/tmp"],
            "nested mount paths",
        ),
        (["pull", "abc@NOPE:/workspace/x", "--root", "/tmp"], "AJUSTE_DATASTORE_NOPE_ENDPOINT_URL"),
        (
            ["pull", "abc@LOCAL:/workspace/x", "--root", "/tmp", "--every", "5"],
            "only applies to push",
        ),
        (["push", "abc@LOCAL:/workspace/x:rw", "--root", "/tmp", "--every", "0"], "positive"),
        (["push", "abc@LOCAL:/workspace/x:rw", "--root", "/tmp", "--workers", "0"], "at least 1"),
        (["push", "abc@LOCAL:/workspace/x:rw"], "--root"),
        (["sync", "abc@LOCAL:/workspace/x", "--root", "/tmp"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(
    s3_server: DatastoreConfig, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # in-process: the same main() as `python -m storage.sync`, without a Python start per case
    try:
        code = main(args, environ=s3_server.to_env())
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    assert code == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


def test_bad_spec_exits_2_and_points_at_the_problem(s3_server: DatastoreConfig) -> None:
    result = run_sync(s3_server, "pull", "abc@LOCAL:/workspace/x:rx", "--root", "/tmp")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[1:] == [
        "  abc@LOCAL:/workspace/x:rx",
        "                         ^",
    ]


@pytest.mark.slow
def test_every_pushes_periodically_and_once_more_on_sigterm(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    out = tmp_path / "workspace/out"
    out.mkdir(parents=True)
    (out / "step-1").write_bytes(b"1")
    spec = f"{bucket}@LOCAL:/workspace/out:rw"
    with sync_process(
        s3_server, "push", spec, "--root", str(tmp_path), "--every", "0.3"
    ) as process:
        periodic = next_result(process)
        assert (periodic["final"], periodic["transferred"]) == (False, 1)
        assert next_result(process)["skipped"] == 1  # the next round finds nothing new
        (out / "step-2").write_bytes(b"2")
        process.send_signal(signal.SIGTERM)
        remaining, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    final = lines(remaining)[-1]
    assert final["final"] is True
    assert all(line["final"] is False for line in lines(remaining)[:-1])
    keys = [info.key for info in iter_objects(s3_server, bucket=bucket)]
    assert keys == ["step-1", "step-2"]


def test_sigint_while_starting_still_ends_with_a_final_push(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    out = tmp_path / "workspace/out"
    out.mkdir(parents=True)
    (out / "last").write_bytes(b"L")
    spec = f"{bucket}@LOCAL:/workspace/out:rw"
    with sync_process(
        s3_server, "push", spec, "--root", str(tmp_path), "--every", "3600"
    ) as process:
        # As soon as the handlers are in place, before boto3 is loaded: the signal is
        # remembered until the loop starts.
        wait_for_handler(process, signal.SIGTERM)
        process.send_signal(signal.SIGINT)
        stdout, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    [final] = lines(stdout)
    assert (final["final"], final["transferred"]) == (True, 1)


def handles(pid: int, signum: int) -> bool:
    """Whether the process has installed a handler for `signum` (the kernel's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signum - 1) & 1)


def wait_for_handler(process: subprocess.Popen[str], signum: int) -> None:
    """Until `process` handles `signum`. storage/sync/__main__.py installs SIGINT's handler
    before SIGTERM's, and Python catches SIGINT from its start (KeyboardInterrupt), so only
    SIGTERM's bit tells that both of the sidecar's own handlers are in place."""
    deadline = time.monotonic() + 60  # a bound, not a timing claim
    while not handles(process.pid, signum):
        assert process.poll() is None, "the process ended before it handled the signal"
        assert time.monotonic() < deadline, "no handler installed within 60 s"
        time.sleep(0.01)


def test_state_dir_carries_the_base_from_pull_to_push_and_conflicts_are_summarized(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="out/a.txt", data=b"base")
    put_object(s3_server, bucket=bucket, key="out/b.txt", data=b"base")
    spec = f"{bucket}@LOCAL/out:/workspace/out:rwd"
    state = ["--root", str(tmp_path), "--state-dir", str(tmp_path / "state")]
    assert run_sync(s3_server, "pull", spec, *state).returncode == 0
    (tmp_path / "workspace/out/a.txt").write_bytes(b"changed here")
    (tmp_path / "workspace/out/b.txt").unlink()
    put_object(s3_server, bucket=bucket, key="out/a.txt", data=b"changed there")
    put_object(s3_server, bucket=bucket, key="out/theirs.txt", data=b"after the pull")
    summary_file = tmp_path / "termination-log"
    # as the panel's pods push: the conflict is the run's note, not a failure
    pushed = run_sync(
        s3_server, "push", spec, *state, "--summary-file", str(summary_file), "--allow-conflicts"
    )
    assert pushed.returncode == 0, pushed.stderr
    [result] = lines(pushed.stdout)
    assert (result["conflicts"], result["deleted"]) == (["out/a.txt"], 1)
    [summary] = summaries(pushed.stdout)
    assert summary == {
        "event": "push",
        "uploaded": 0,
        "deleted": 1,
        "failed": 0,
        "conflicts": ["out/a.txt"],
        "conflicts_total": 1,
        "final": True,
    }
    assert json.loads(summary_file.read_text()) == summary
    keys = [info.key for info in iter_objects(s3_server, bucket=bucket)]
    assert keys == ["out/a.txt", "out/theirs.txt"]


def test_pull_then_push_without_state_dir_share_a_base_under_the_root(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    """The README's pull then push with --state-dir dropped: the push still knows what was
    pulled, so the files the user changed are sent, not reported as conflicts."""
    put_object(s3_server, bucket=bucket, key="out/a.txt", data=b"pulled")
    put_object(s3_server, bucket=bucket, key="out/gone.txt", data=b"pulled")
    spec = f"{bucket}@LOCAL/out:/workspace/out:rwd"
    root = ["--root", str(tmp_path / "sandbox")]
    assert run_sync(s3_server, "pull", spec, *root).returncode == 0
    assert list((tmp_path / "sandbox/.ajuste-sync").glob("manifest-*.json"))
    (tmp_path / "sandbox/workspace/out/a.txt").write_bytes(b"changed by me")
    (tmp_path / "sandbox/workspace/out/gone.txt").unlink()
    pushed = run_sync(s3_server, "push", spec, *root)
    assert pushed.returncode == 0, pushed.stderr
    [summary] = summaries(pushed.stdout)
    assert (summary["uploaded"], summary["deleted"], summary["conflicts"]) == (1, 1, [])
    assert read_object(s3_server, bucket=bucket, key="out/a.txt", max_bytes=100) == b"changed by me"
    assert [info.key for info in iter_objects(s3_server, bucket=bucket)] == ["out/a.txt"]


def test_a_push_that_keeps_what_changed_remotely_exits_3_naming_the_files(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    """Three-way push at the command's layer: a file changed both here and in the bucket since
    the pull keeps the bucket's copy, the local one stays, and the person is told (exit 3)."""
    put_object(s3_server, bucket=bucket, key="out/both.txt", data=b"base")
    put_object(s3_server, bucket=bucket, key="out/mine.txt", data=b"base")
    spec = f"{bucket}@LOCAL/out:/workspace/out:rw"
    root = ["--root", str(tmp_path)]
    assert run_sync(s3_server, "pull", spec, *root).returncode == 0
    (tmp_path / "workspace/out/both.txt").write_bytes(b"changed here")
    (tmp_path / "workspace/out/mine.txt").write_bytes(b"only here")
    put_object(s3_server, bucket=bucket, key="out/both.txt", data=b"changed there")
    pushed = run_sync(s3_server, "push", spec, *root)
    assert pushed.returncode == 3
    assert "1 file(s) changed both here and in the bucket" in pushed.stderr
    assert pushed.stderr.splitlines()[1:] == ["  out/both.txt"]
    assert (
        read_object(s3_server, bucket=bucket, key="out/both.txt", max_bytes=100) == b"changed there"
    )
    assert read_object(s3_server, bucket=bucket, key="out/mine.txt", max_bytes=100) == b"only here"
    assert (tmp_path / "workspace/out/both.txt").read_bytes() == b"changed here"
    again = run_sync(s3_server, "push", spec, *root)  # still there: still said
    assert (again.returncode, lines(again.stdout)[0]["conflicts"]) == (3, ["out/both.txt"])
    allowed = run_sync(s3_server, "push", spec, *root, "--allow-conflicts")
    assert (allowed.returncode, allowed.stderr) == (0, "")
    assert (
        read_object(s3_server, bucket=bucket, key="out/both.txt", max_bytes=100) == b"changed there"
    )


@pytest.mark.parametrize("option", ["--state-dir", "--progress-file", "--summary-file"])
def test_sync_files_inside_a_volume_are_refused(
    s3_server: DatastoreConfig, capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str
) -> None:
    # A volume mounted at /workspace itself holds everything below it.
    spec = "abc@LOCAL:/workspace:rw"
    inside = str(tmp_path / "workspace/.ajuste-pull.json")
    code = main(["pull", spec, "--root", str(tmp_path), option, inside], s3_server.to_env())
    assert code == 2
    err = capsys.readouterr().err
    assert f"{option} {inside} is inside the directory of volume {spec}" in err
    assert not (tmp_path / "workspace").exists()


def test_summary_text_fits_a_termination_message() -> None:
    keys = [f"runs/{index:05}/" + "k" * 80 for index in range(500)]
    line = {"event": "push", "uploaded": 3, "conflicts": keys, "conflicts_total": 500}
    text = summary_text(line)
    assert len(text.encode()) <= 4096
    parsed = json.loads(text)
    assert parsed["conflicts_total"] == 500
    assert 0 < len(parsed["conflicts"]) < 500
    assert parsed["conflicts"] == keys[: len(parsed["conflicts"])]


@SIGNATURES_CHECKED  # an expired secret must be refused
def test_the_periodic_push_reads_renewed_credentials_from_their_files(
    tmp_path: Path, s3_server: DatastoreConfig, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short-lived keys are renewed into the mounted files while a job runs: each push reads
    them again, so a sidecar that started with keys that no longer work recovers."""
    import io
    import threading

    from storage.datastore import DIR_VARIABLE, file_name
    from storage.sync.cli import Reporter, push_every, resolve_volumes

    keys = tmp_path / "datastores"
    keys.mkdir()
    fields = {"endpoint_url": s3_server.endpoint_url, "region": s3_server.region,
              "access_key": s3_server.access_key, "secret_key": "expired"}  # fmt: skip
    for name, value in fields.items():
        (keys / file_name("LOCAL", name)).write_text(value)
    monkeypatch.setenv(DIR_VARIABLE, str(keys))
    root = tmp_path / "root"
    (root / "workspace/out").mkdir(parents=True)
    (root / "workspace/out/a.txt").write_text("checkpoint")
    volumes = resolve_volumes([f"{bucket}@LOCAL:/workspace/out:rw"], root, os.environ)
    out, stop = io.StringIO(), threading.Event()

    def summaries() -> list[dict]:
        lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
        return [x for x in lines if x.get("event") == "push"]

    def renew_then_stop() -> None:
        while not summaries():  # the first push, refused with the expired key
            time.sleep(0.05)
        (keys / file_name("LOCAL", "secret_key")).write_text(s3_server.secret_key)
        deadline = time.monotonic() + 30  # a bound, not a timing claim: stop either way
        while not any(s["uploaded"] for s in summaries()) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()

    helper = threading.Thread(target=renew_then_stop, daemon=True)
    helper.start()
    push_every(volumes, Reporter("push", None, out), workers=2, every=0.1, stop=stop)
    helper.join(5)
    assert summaries()[0]["uploaded"] == 0
    assert read_object(s3_server, bucket=bucket, key="a.txt", max_bytes=100) == (b"checkpoint")
