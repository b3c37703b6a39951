"""Set a run up: tokenized and packed data, then model, optimizer and schedule."""

from __future__ import annotations

import hashlib
import math
import random
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.data.batches import RowData
from training.data.jsonl import DatasetError, Record
from training.data.packing import (
    Layout,
    fill_ratio,
    group_by_length,
    pack,
    padded_ratio,
    unpacked,
)
from training.data.tokenize import Example, tokenize_records
from training.distributed import Ranks
from training.modeling import Placement, add_lora, load_model
from training.options import Options
from training.reporting import Reporter

# Options that must not change between a checkpoint and the run resuming from it.
FINGERPRINT_OPTIONS = (
    "model",
    "method",
    "rank",
    "alpha",
    "target_modules",
    "max_length",
    "packing",
    "batch_size",
    "seed",
)


@dataclass
class Data:
    """The training and eval rows, how they are scheduled, and the run's fingerprint."""

    train: RowData
    evalset: RowData | None
    layout: Layout
    max_steps: int
    fingerprint: dict[str, Any]


def packing_mode(opts: Options, attn: str) -> str:
    """ "on" (packed rows) or "off" (length-grouped batches); see data/packing.py for why."""
    if opts.packing != "auto":
        return opts.packing
    return "on" if attn == "flash_attention_2" else "off"


def _layout(
    examples: list[Example], opts: Options, mode: str, world: int, pad_id: int
) -> tuple[RowData, Layout, str]:
    """Rows, their micro-batch layout, and a line for the log saying how full they are."""
    lengths = [len(ex.input_ids) for ex in examples]
    steps = (opts.batch_size, opts.grad_accum, world, opts.seed)
    if mode == "on":
        rows = pack(lengths, opts.max_length)
        fill = fill_ratio(rows, examples, opts.max_length)
        note = (
            f"packed in {len(rows)} sequences of up to {opts.max_length} tokens ({fill:.0%} full)"
        )
        return RowData(examples, rows, pad_id), Layout(len(rows), *steps), note
    batches = group_by_length(lengths, opts.batch_size * opts.max_length)
    fill = padded_ratio(batches, lengths)
    note = (
        f"in {len(batches)} micro-batches grouped by length ({fill:.0%} real tokens, not padding)"
    )
    fixed = tuple(tuple(b) for b in batches)
    return (
        RowData(examples, unpacked(len(examples)), pad_id),
        Layout(len(examples), *steps, fixed),
        note,
    )


def data_digest(examples: list[Example]) -> str:
    """Changes when the tokenized data does (a resumed run must see the same data order)."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(array("q", ex.input_ids).tobytes())
        h.update(array("q", ex.labels).tobytes())
    return h.hexdigest()[:16]


def model_identity(model: str) -> str:
    """What a checkpoint remembers of the base model: a hub id as given; for a directory, its
    files' names, sizes and first MiB (configs whole, each weight shard's header and first
    tensors), not its path: a volume is mounted at a new place for every run on the local
    backend, and the same model moved must still resume."""
    root = Path(model)
    if not root.is_dir():
        return model
    h = hashlib.sha256()
    files = (p for p in root.rglob("*") if p.is_file())
    for path in sorted(p for p in files if not any(x.startswith(".") for x in p.parts)):
        h.update(f"{path.relative_to(root)}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            h.update(fh.read(1 << 20))
    return f"dir:{h.hexdigest()[:16]}"


def _tokenize(
    tok: Any, records: list[Record], opts: Options, what: str, log: Reporter
) -> list[Example]:
    examples, stats = tokenize_records(tok, records, opts.max_length)
    log.log(f"{what}: {stats.describe(opts.max_length)}")
    if records and not examples:
        first = records[0]
        raise DatasetError(
            [
                {
                    "file": first.file,
                    "line": 0,
                    "message": f"no {what} example has anything left "
                    f"to learn within --max-length {opts.max_length}",
                }
            ],
            1,
        )
    return examples


def prepare_data(
    opts: Options,
    tok: Any,
    records: tuple[list[Record], list[Record]],
    ranks: Ranks,
    log: Reporter,
    attn: str,
) -> Data:
    train_ex = _tokenize(tok, records[0], opts, "train set", log)
    eval_ex = _tokenize(tok, records[1], opts, "eval set", log) if records[1] else []
    mode = packing_mode(opts, attn)
    train, layout, note = _layout(train_ex, opts, mode, ranks.world_size, tok.pad_token_id)
    if opts.max_steps > 0:
        max_steps = opts.max_steps
    else:
        max_steps = max(1, math.ceil(opts.epochs * layout.steps_per_epoch))
    log.log(
        f"{len(train_ex)} examples {note}; {layout.steps_per_epoch} steps per epoch, "
        f"{max_steps} steps"
    )
    fingerprint = {name: getattr(opts, name) for name in FINGERPRINT_OPTIONS}
    fingerprint |= {
        "model": model_identity(opts.model),
        "packing": mode,
        # the global batch, not how it is split: 2 ranks x 1 micro-batch resume 1 x 2 exactly
        "micro_batches_per_step": layout.batches_per_step,
        "data": data_digest(train_ex),
    }
    evalset = _layout(eval_ex, opts, mode, 1, tok.pad_token_id)[0] if eval_ex else None
    return Data(train, evalset, layout, max_steps, fingerprint)


def fingerprint_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    return sorted(k for k in current if saved.get(k) != current[k])


@dataclass
class Trainable:
    """The model and what updates it."""

    model: Any
    module: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    parallel: str = "none"  # sharding.strategy


def make_schedule(optimizer: torch.optim.Optimizer, opts: Options, max_steps: int) -> Any:
    from transformers import get_cosine_schedule_with_warmup

    warmup = (
        opts.warmup_steps if opts.warmup_steps >= 0 else math.ceil(opts.warmup_ratio * max_steps)
    )
    return get_cosine_schedule_with_warmup(optimizer, warmup, max_steps)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def build_trainable(opts: Options, where: Placement, ranks: Ranks, max_steps: int) -> Trainable:
    from training import sharding
    from training.loss import CausalLMLoss

    how = sharding.strategy(opts, where, ranks)
    # FSDP loads on the CPU: only this rank's shards go to its GPU (the whole may not fit)
    model = add_lora(load_model(opts, where, on_cpu=how == "fsdp"), opts)
    # from_pretrained leaves every layer in eval mode, and transformers checkpoints a layer
    # only while it trains: without this, gradient checkpointing would silently stay off.
    model.train()
    module = sharding.wrap(CausalLMLoss(model), model, where, ranks, how)
    # after wrapping: FSDP replaces the parameters by their shards
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=opts.learning_rate,
        weight_decay=opts.weight_decay,
        fused=where.device.type == "cuda" and how != "fsdp",
    )
    return Trainable(model, module, optimizer, make_schedule(optimizer, opts, max_steps), how)


def save_adapter(model: Any, tok: Any, target: Path, weights: dict[str, Any]) -> None:
    """Write the adapter (`weights`: checkpoint.gather's, whole even when sharded) and the
    tokenizer next to the final place, then swap them in."""
    import shutil

    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict={k: v.detach().cpu() for k, v in weights.items()})
    tok.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
