"""The finalize Job pushes only after a complete pull (an rwd push of a partial workspace
would delete what was not pulled yet)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from deploy.finalize import pull_completed

DONE = {"event": "result", "final": True, "failed": 0, "failures": []}


def progress(path: Path, *volumes: dict[str, object], direction: str = "pull") -> Path:
    path.write_text(json.dumps({"direction": direction, "volumes": list(volumes)}))
    return path


def test_only_a_complete_pull_counts(tmp_path: Path) -> None:
    assert pull_completed(progress(tmp_path / "ok.json", DONE, DONE))
    assert not pull_completed(tmp_path / "missing.json")
    assert not pull_completed(progress(tmp_path / "running.json", DONE, {"event": "progress"}))
    assert not pull_completed(progress(tmp_path / "failed.json", {**DONE, "failed": 2}))
    listing = {**DONE, "failures": [{"key": "b/p", "error": "NoSuchBucket"}]}
    assert not pull_completed(progress(tmp_path / "listing.json", listing))
    assert not pull_completed(progress(tmp_path / "push.json", DONE, direction="push"))
    (tmp_path / "torn.json").write_text("{")
    assert not pull_completed(tmp_path / "torn.json")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "deploy.finalize", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_skips_without_a_complete_pull_and_hands_over_otherwise(tmp_path: Path) -> None:
    skipped = run(str(tmp_path / "none.json"), "--", "push", "b@LOCAL:/workspace/o:rw")
    assert skipped.returncode == 0
    assert json.loads(skipped.stdout)["event"] == "skip"

    # With a complete pull it becomes `python -m storage.sync push ...`, which here rejects
    # the missing credentials with its usage exit status.
    handed = run(
        str(progress(tmp_path / "ok.json", DONE)),
        "--",
        "push",
        "b@NOPE:/workspace/o:rw",
        "--root",
        str(tmp_path),
    )
    assert handed.returncode == 2
    assert "python -m storage.sync" in handed.stderr
