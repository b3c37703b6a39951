"""A checkpoint is bucket content: whoever can write to the bucket must not be able to run code
in the next run's pod by planting a pickle in it (issue 17: the resume read
`torch.load(..., weights_only=False)`). Every file is read as plain tensors or refused, even
with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1, which flips torch.load's default."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from tests.fixtures.llm import QUICK, REPO, TinyLLM, finetune_command, finetune_env, parse_output
from training import checkpoint
from training.distributed import Ranks


class Payload:
    """Unpickling this creates `marker`: any code could run in its place."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def plant(path: Path, marker: Path) -> None:
    """Replace a checkpoint file by a pickle carrying the payload beside plausible content."""
    torch.save({"state": {}, "param_groups": [], "extra": Payload(marker)}, path)


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
def test_a_pickled_payload_in_a_checkpoint_is_refused_and_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    step = tmp_path / "checkpoints" / "step-000003"
    step.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, step / "trainable.safetensors")
    torch.save({"state": {}, "param_groups": []}, step / "optimizer.pt")
    torch.save({"last_epoch": 3}, step / "scheduler.pt")
    (step / "state.json").write_text(json.dumps({"step": 3, "format": checkpoint.FORMAT}))
    marker = tmp_path / "pwned"
    plant(step / name, marker)

    with pytest.raises(checkpoint.CheckpointError, match=rf"{name} could not be read as plain"):
        checkpoint.load(step, None, None, None, Ranks())
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng-0.pt"])
def test_the_preset_resuming_from_a_planted_checkpoint_runs_nothing(
    tiny_llm: TinyLLM, finetune_runs: dict[str, Any], tmp_path: Path, name: str
) -> None:
    """The real entry point resumes from a copy of a finished run's output whose newest
    checkpoint carries a payload. rng-0.pt is what checkpoints of format 1 held and the old
    resume unpickled: it is no longer read at all (and no other file of the copy is a pickle
    that matters: the run then finishes)."""
    import subprocess

    _, finished = finetune_runs["text"]
    out = Path(shutil.copytree(finished, tmp_path / "out"))
    marker = tmp_path / "pwned"
    plant(out / "checkpoints" / "step-000012" / name, marker)
    env = finetune_env() | {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    args = ["--model", tiny_llm.model_dir, "--data", tiny_llm.text, "--output", out, *QUICK]
    proc = subprocess.run(
        finetune_command(*args), cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    result = parse_output(proc.returncode, proc.stdout, proc.stderr)

    assert not marker.exists()
    if name == "rng-0.pt":
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.of("resumed")[0]["step"] == 12 and result.of("done")
        return
    assert result.returncode == 2
    [error] = [e for e in result.events if e["event"] == "error"]
    assert error["kind"] == "config"
    assert f"{name} could not be read as plain tensors" in error["message"]
    assert "--no-resume" in error["message"]
    assert not result.of("done") and not result.of("start")
    assert json.loads((out / "status.json").read_text())["state"] == "failed"
