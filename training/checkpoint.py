"""Checkpoints under OUTPUT/checkpoints/step-NNNNNN/, enough to resume exactly.

Each holds the adapter (peft format), the optimizer and scheduler states, every rank's RNG
states and `state.json` (step, tokens, elapsed time, the run's fingerprint). The data position
needs no file: it follows from the step (see data.packing.Layout). A checkpoint is written to
`step-NNNNNN.tmp` and renamed when complete, so a pod killed mid-write leaves no half
checkpoint behind that a restart could pick up.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from training.distributed import Ranks

PREFIX = "step-"


@dataclass
class TrainState:
    """Progress that survives a restart."""

    step: int = 0
    tokens_seen: int = 0
    elapsed_s: float = 0.0
    loss_sum: float = 0.0
    loss_tokens: int = 0
    fingerprint: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_loss(self) -> float | None:
        return self.loss_sum / self.loss_tokens if self.loss_tokens else None


def checkpoints(output: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = output / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()
    ]
    return sorted((p for p in found if (p / "state.json").is_file()), key=lambda p: p.name)


def latest(output: Path) -> Path | None:
    found = checkpoints(output)
    return found[-1] if found else None


def remove_partial(output: Path) -> None:
    """Drop what a killed run left half-written."""
    root = output / "checkpoints"
    if root.is_dir():
        for p in root.glob(f"{PREFIX}*.tmp"):
            shutil.rmtree(p, ignore_errors=True)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_main(tmp: Path, model: Any, optimizer: Any, scheduler: Any, state: TrainState) -> None:
    model.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    # state.json last: its presence is what marks a checkpoint as complete
    (tmp / "state.json").write_text(json.dumps(asdict(state), indent=1))


def save(
    output: Path,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    state: TrainState,
    ranks: Ranks,
    keep: int,
) -> Path:
    """Write a checkpoint for state.step atomically and keep only the newest `keep`."""
    final = output / "checkpoints" / f"{PREFIX}{state.step:06d}"
    tmp = final.with_name(final.name + ".tmp")
    if ranks.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    ranks.barrier()
    torch.save(_rng_state(), tmp / f"rng-{ranks.rank}.pt")
    ranks.barrier()
    if ranks.is_main:
        _write_main(tmp, model, optimizer, scheduler, state)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in checkpoints(output)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    ranks.barrier()
    return final


def read_state(path: Path) -> TrainState:
    return TrainState(**json.loads((path / "state.json").read_text()))


def load(path: Path, model: Any, optimizer: Any, scheduler: Any, ranks: Ranks) -> TrainState:
    """Restore adapter weights, optimizer, scheduler and RNG from a checkpoint."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    device = next(p.device for p in model.parameters() if p.requires_grad)
    result = set_peft_model_state_dict(model, load_file(path / "adapter_model.safetensors"))
    unexpected = list(getattr(result, "unexpected_keys", None) or [])
    if unexpected:
        raise RuntimeError(f"checkpoint {path} does not fit this adapter: {unexpected[:3]}")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt"))
    rng = path / f"rng-{ranks.rank}.pt"
    _set_rng_state(torch.load(rng if rng.exists() else path / "rng-0.pt", weights_only=False))
    return read_state(path)
