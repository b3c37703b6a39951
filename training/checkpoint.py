"""Checkpoints under OUTPUT/checkpoints/step-NNNNNN/, enough to resume exactly.

Each holds the adapter twice over: in peft's format (`adapter_model.safetensors`, loadable
with `PeftModel.from_pretrained`) and as `trainable.safetensors`, the trainable parameters
under the model's own names, which is what a resume reads, whatever the ranks' sharding; the
optimizer state (`optimizer.pt`, by parameter name) and the schedule (`scheduler.pt`); and
`state.json` (step, tokens, elapsed time, the run's fingerprint, the format). The data order
and the dropout masks need no file: they follow from the seed and the step (see
data.packing.Layout and loop.seed_micro_batch).

Only the writer (distributed.Ranks.is_main) reads or writes the directory: with several nodes,
the others have no copy of it. A checkpoint is written to `step-NNNNNN.tmp` and renamed when
complete, so a pod killed mid-write leaves no half checkpoint that a restart could pick up.

The directory is bucket content (a volume pulled into the pod): nothing in it may run code.
Tensors are read with safetensors or `torch.load(weights_only=True)`, which refuses any pickled
object but tensors and plain containers; a refused file is a CheckpointError.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from training.distributed import Ranks, broadcast_tree

PREFIX = "step-"
FORMAT = 2  # 1: before several nodes (RNG files, optimizer state by index)


class CheckpointError(Exception):
    """A checkpoint that cannot be used: unsafe, damaged or of an older format."""


@dataclass
class TrainState:
    """Progress that survives a restart."""

    step: int = 0
    tokens_seen: int = 0
    elapsed_s: float = 0.0
    loss_sum: float = 0.0
    loss_tokens: int = 0
    fingerprint: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT

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


def _options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, ignore_frozen_params=True, **kw)


def gather(model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainable weights, optimizer state or {} without an optimizer), whole and by parameter
    name, on every rank (a collective when the model is sharded); LoRA-sized."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    weights = get_model_state_dict(model, options=_options())
    if optimizer is None:
        return weights, {}
    return weights, get_optimizer_state_dict(model, optimizer, options=_options())


def _write(
    tmp: Path, model: Any, parts: tuple[Any, Any], scheduler: Any, state: TrainState
) -> None:
    from safetensors.torch import save_file

    weights = {k: v.detach().cpu().contiguous() for k, v in parts[0].items()}
    save_file(weights, tmp / "trainable.safetensors")
    model.save_pretrained(tmp, state_dict=weights)
    torch.save(parts[1], tmp / "optimizer.pt")
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
    parts = gather(model, optimizer)
    if ranks.is_main:
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _write(tmp, model, parts, scheduler, state)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in checkpoints(output)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    ranks.barrier()  # nobody goes on (or exits) before the checkpoint is complete
    return final


def read_state(path: Path) -> TrainState:
    stored = json.loads((path / "state.json").read_text())
    if stored.get("format") != FORMAT:
        raise CheckpointError(
            f"checkpoint {path} was written by an older version of the fine-tune preset "
            f"(format {stored.get('format', 1)}, this one reads {FORMAT})"
        )
    return TrainState(**stored)


def _load_tensors(path: Path) -> dict[str, Any]:
    """What the writer reads: safetensors, and torch.load of plain data only."""
    from safetensors.torch import load_file

    found: dict[str, Any] = {}
    for name in ("trainable.safetensors", "optimizer.pt", "scheduler.pt"):
        try:
            if name.endswith(".safetensors"):
                found[name] = load_file(path / name)
            else:
                found[name] = torch.load(path / name, map_location="cpu", weights_only=True)
        except Exception as exc:  # UnpicklingError for a payload, OSError, a damaged header
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise CheckpointError(
                f"checkpoint {path} is refused: {name} could not be read as plain tensors "
                f"({type(exc).__name__}: {reason})"
            ) from None
    return found


def load(path: Path | None, model: Any, optimizer: Any, scheduler: Any, ranks: Ranks) -> TrainState:
    """Restore weights, optimizer and schedule from the writer's checkpoint, on every rank.

    `path` matters on the writer only; every rank must call this (it broadcasts)."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    found: dict[str, Any] = {}
    if ranks.is_main:
        try:
            assert path is not None
            found = {**_load_tensors(path), "state": asdict(read_state(path))}
        except CheckpointError as exc:
            found = {"error": str(exc)}  # the others must hear of it, not wait for tensors
    found = broadcast_tree(ranks, found)
    if "error" in found:
        raise CheckpointError(found["error"])
    result = set_model_state_dict(
        model, found["trainable.safetensors"], options=_options(strict=False)
    )
    if result.unexpected_keys:
        raise CheckpointError(
            f"checkpoint {path} does not fit this adapter: {result.unexpected_keys[:3]}"
        )
    set_optimizer_state_dict(model, optimizer, found["optimizer.pt"], options=_options())
    scheduler.load_state_dict(found["scheduler.pt"])
    return TrainState(**found["state"])
