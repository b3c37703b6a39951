"""Kill a run after a checkpoint, stop another with SIGTERM: each restart continues exactly."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.llm import QUICK, TinyLLM
from tests.training.ranks import Hold, finish, losses, read_until, start
from training.finetune import _resume_point
from training.options import OptionsError, parse_options
from training.reporting import Reporter


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_checkpoint_and_continues_exactly(
    tiny_llm: TinyLLM, finetune_runs: dict[str, Any], tmp_path: Path
) -> None:
    reference, _ = finetune_runs["text"]  # the same options, run without interruption
    out = tmp_path / "out"
    base = ("--model", tiny_llm.model_dir, "--data", tiny_llm.text, "--output", out, *QUICK)

    # Held right after its checkpoint at step 3 (no step 4 yet), then killed.
    hold = Hold(tmp_path, "checkpoint", 3)
    proc = start(*base, env=hold.env)
    before = read_until(proc, "checkpoint", 3)
    proc.send_signal(signal.SIGKILL)
    killed = finish(proc, before)
    assert killed.returncode == -signal.SIGKILL
    assert not killed.of("done") and killed.of("progress")[-1]["step"] == 3
    assert [p.name for p in (out / "checkpoints").glob("step-*")] == ["step-000003"]

    # Resumed, held after its first progress event (step 4), stopped by SIGTERM meanwhile:
    # it finishes step 4, checkpoints it and exits.
    hold = Hold(tmp_path, "progress", 4)
    proc = start(*base, env=hold.env)
    before = read_until(proc, "progress", 4)
    proc.send_signal(signal.SIGTERM)
    hold.release()
    stopped = finish(proc, before)
    assert stopped.returncode == 143
    assert stopped.of("start")[0]["resumed_from_step"] == 3
    assert stopped.of("resumed") == [stopped.of("resumed")[0]]
    assert stopped.of("resumed")[0]["step"] == 3
    assert [e["step"] for e in stopped.of("progress")] == [4]  # continues, does not restart
    [interrupted] = stopped.of("interrupted")
    assert interrupted["step"] == 4 and interrupted["signal"] == "SIGTERM"
    assert interrupted["checkpoint"] == str(out / "checkpoints" / "step-000004")
    [error] = stopped.of("error")
    assert error["kind"] == "interrupted" and error["exit_code"] == 143
    assert "at step 4" in error["message"]
    assert json.loads((out / "status.json").read_text())["state"] == "interrupted"
    assert (out / "checkpoints" / "step-000004" / "optimizer.pt").is_file()

    expected = {s: loss for s, loss in losses(reference).items() if s <= 4}
    assert {**losses(killed), **losses(stopped)} == pytest.approx(expected, rel=1e-5)
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # a step redone after the kill is not written twice


def test_checkpoints_of_another_configuration_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "checkpoints" / "step-000010"
    state.mkdir(parents=True)
    fingerprint: dict[str, Any] = {"rank": 16, "data": "abc", "seed": 1}
    (state / "state.json").write_text(
        json.dumps({"step": 10, "fingerprint": fingerprint, "format": 2})
    )
    (tmp_path / "checkpoints" / "step-000020.tmp").mkdir()  # what a kill mid-write leaves
    opts = parse_options(["--model", "m", "--data", "d", "--output", str(tmp_path)])
    reporter = Reporter(None, enabled=False)

    assert _resume_point(opts, fingerprint, reporter) == state
    assert not (tmp_path / "checkpoints" / "step-000020.tmp").exists()
    with pytest.raises(OptionsError, match=r"changed: data, rank\).*--no-resume"):
        _resume_point(opts, fingerprint | {"rank": 8, "data": "xyz"}, reporter)
    fresh = parse_options(["--model", "m", "--data", "d", "--output", str(tmp_path), "--no-resume"])
    assert _resume_point(fresh, fingerprint | {"rank": 8}, reporter) is None


def test_the_model_is_known_by_its_files_not_its_path(tiny_llm: TinyLLM, tmp_path: Path) -> None:
    """The local backend mounts a volume at a new place for every run: the same model there
    must resume; a different one must not."""
    import shutil

    from training.prepare import model_identity

    moved = shutil.copytree(tiny_llm.model_dir, tmp_path / "elsewhere" / "model")
    (moved / ".cache").mkdir()
    (moved / ".cache" / "download.lock").write_text("bookkeeping of a download tool")
    assert model_identity(str(moved)) == model_identity(str(tiny_llm.model_dir))
    config = json.loads((moved / "config.json").read_text())
    (moved / "config.json").write_text(json.dumps(config | {"rms_norm_eps": 1e-5}))
    assert model_identity(str(moved)) != model_identity(str(tiny_llm.model_dir))
    assert model_identity("mistralai/Mistral-7B-v0.3") == "mistralai/Mistral-7B-v0.3"
