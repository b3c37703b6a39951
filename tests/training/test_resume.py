"""Kill a run after a checkpoint, stop another with SIGTERM: each restart continues exactly."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.llm import QUICK, FinetuneResult, TinyLLM, parse_output, start_finetune
from training.finetune import _resume_point
from training.options import OptionsError, parse_options
from training.protocol import parse_line
from training.reporting import Reporter


def run_until(proc: subprocess.Popen[str], event: str, sig: signal.Signals) -> FinetuneResult:
    """Read the run's output until the first `event`, then send it `sig` and collect the rest.

    The run still has most of its 12 steps to go, tens of milliseconds at the least, when the
    signal lands within a millisecond or so."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        parsed = parse_line(line)
        if parsed and parsed["event"] == event:
            proc.send_signal(sig)
            break
    rest, _ = proc.communicate(timeout=120)
    return parse_output(proc.returncode, "".join(lines) + rest, "")


def losses(result: FinetuneResult) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in result.of("progress")}


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_checkpoint_and_continues_exactly(
    tiny_llm: TinyLLM, finetune_runs: dict[str, Any], tmp_path: Path
) -> None:
    reference, _ = finetune_runs["text"]  # the same options, run without interruption
    base = ("--model", tiny_llm.model_dir, "--data", tiny_llm.text, "--output", tmp_path, *QUICK)

    killed = run_until(start_finetune(*base), "checkpoint", signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert not killed.of("done")
    saved = max(int(p.name.split("-")[1]) for p in (tmp_path / "checkpoints").glob("step-??????"))
    assert saved >= 3 and saved % 3 == 0

    stopped = run_until(start_finetune(*base), "progress", signal.SIGTERM)
    assert stopped.returncode == 143
    assert stopped.of("start")[0]["resumed_from_step"] == saved
    assert stopped.of("progress")[0]["step"] == saved + 1  # continues, does not restart
    [error] = stopped.of("error")
    assert error["kind"] == "interrupted" and error["exit_code"] == 143
    at = stopped.of("checkpoint")[-1]["step"]
    assert at == stopped.of("progress")[-1]["step"] < 12  # checkpointed where it stopped
    assert f"at step {at}" in error["message"]
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "interrupted"
    assert (tmp_path / "checkpoints" / f"step-{at:06d}" / "optimizer.pt").is_file()

    expected = {s: loss for s, loss in losses(reference).items() if s in losses(stopped)}
    assert len(expected) == at - saved
    assert losses(stopped) == pytest.approx(expected, rel=1e-5)  # same data, RNG, optimizer
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, at + 1))  # the steps redone after the kill are not doubled


def test_checkpoints_of_another_configuration_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "checkpoints" / "step-000010"
    state.mkdir(parents=True)
    fingerprint: dict[str, Any] = {"rank": 16, "data": "abc", "seed": 1}
    (state / "state.json").write_text(json.dumps({"step": 10, "fingerprint": fingerprint}))
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
