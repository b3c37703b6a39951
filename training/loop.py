"""The training loop: plain PyTorch, one optimizer step at a time.

Why not `transformers.Trainer`: this loop packs sequences, projects only learned positions onto
the vocabulary (see loss.py), normalises the loss by the learned tokens of the whole step, syncs
the GPU only when it reports, and writes the progress protocol itself. It is measured against a
Trainer + peft loop by bench/bench_finetune_cpu.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from training import checkpoint, sharding
from training.checkpoint import TrainState
from training.data.batches import RowData
from training.data.packing import Layout, group_by_length
from training.distributed import Ranks
from training.modeling import Placement
from training.options import Options
from training.reporting import Reporter


@dataclass
class Window:
    """What happened since the last progress event, and in this process overall."""

    started: float = field(default_factory=time.perf_counter)
    loss_sum: torch.Tensor | None = None  # stays on the device: no GPU sync per step
    learned: int = 0
    tokens: int = 0
    paused: float = 0.0  # eval and checkpoint time: not part of the training throughput
    process_start: float = field(default_factory=time.perf_counter)
    process_steps: int = 0
    process_tokens: int = 0
    reported: bool = False

    def add(self, loss_sum: torch.Tensor, learned: int, tokens: int) -> None:
        self.loss_sum = loss_sum if self.loss_sum is None else self.loss_sum + loss_sum
        self.learned += learned
        self.tokens += tokens
        self.process_steps += 1
        self.process_tokens += tokens

    def reset(self) -> None:
        self.started, self.loss_sum = time.perf_counter(), None
        self.learned, self.tokens, self.paused = 0, 0, 0.0

    def process_seconds(self) -> float:
        """Wall time of the loop in this process, evals and checkpoints included."""
        return time.perf_counter() - self.process_start


@dataclass
class Run:
    """Everything the loop touches."""

    opts: Options
    ranks: Ranks
    where: Placement
    reporter: Reporter
    output: Path
    model: Any  # the peft model (saved, evaluated)
    module: Any  # CausalLMLoss, in DDP or sharded by FSDP when distributed (trained)
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train: RowData
    layout: Layout
    evalset: RowData | None
    max_steps: int
    state: TrainState
    window: Window = field(default_factory=Window)
    last_lr: float = 0.0
    clock: float = field(default_factory=time.perf_counter)
    parallel: str = "none"  # or "ddp", "fsdp" (sharding.strategy)
    last_checkpoint: Path | None = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.where.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.where.device.type, dtype=self.where.dtype)

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.where.device, non_blocking=True) for k, v in batch.items()}


def seed_micro_batch(seed: int, step: int, index: int, device: torch.device) -> None:
    """Seed the dropout masks of micro-batch `index` (of all ranks) of `step`.

    The masks then depend on the data alone, not on which rank computes the micro-batch nor
    on what ran before: a run on 2 ranks sees the masks a run on 1 rank with twice the
    accumulation sees, and a resumed run needs no saved RNG state."""
    digest = hashlib.blake2b(f"{seed}:{step}:{index}".encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little") >> 1
    torch.default_generator.manual_seed(value)
    if device.type == "cuda":
        torch.cuda.manual_seed(value)  # this rank's GPU only


def train_step(
    run: Run, micro: list[list[int]], learned: int, step: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over this rank's micro-batches, then one optimizer step.

    Each micro-batch's summed loss is divided by the learned tokens of the whole step (all
    ranks), times the world size that DDP's (and FSDP's) gradient averaging divides by again:
    the gradient is then exactly that of the mean loss per learned token of the step.
    """
    ranks = run.ranks
    scale = ranks.world_size / max(1, learned)
    total = torch.zeros((), device=run.where.device)
    for k, rows in enumerate(micro):
        batch = run.to_device(run.train.collate(rows))
        # this rank's k-th micro-batch is the step's (k * world + rank)-th (Layout.step_batches)
        seed_micro_batch(run.opts.seed, step, k * ranks.world_size + ranks.rank, run.where.device)
        with sharding.no_sync(run.module, run.parallel, k == len(micro) - 1), run.autocast():
            loss_sum = run.module(**batch)
        (loss_sum * scale).backward()
        total += loss_sum.detach()
    params = [p for g in run.optimizer.param_groups for p in g["params"]]
    norm = torch.nn.utils.clip_grad_norm_(params, run.opts.max_grad_norm or math.inf)
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return total, sharding.full_norm(norm)


def steps(run: Run) -> Iterator[tuple[int, list[list[int]], int, int]]:
    """(step index, this rank's micro-batches, learned tokens and real tokens of all ranks)."""
    batches: list[list[int]] = []
    epoch = -1
    for step in range(run.state.step, run.max_steps):
        if step // run.layout.steps_per_epoch != epoch:
            epoch = step // run.layout.steps_per_epoch
            batches = run.layout.epoch_batches(epoch)
        per_rank = run.layout.step_batches(batches, step % run.layout.steps_per_epoch)
        tokens, learned = run.train.count([r for rank in per_rank for mb in rank for r in mb])
        yield step, per_rank[run.ranks.rank], learned, tokens


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def report_progress(run: Run, grad_norm: torch.Tensor) -> None:
    """One progress event for the window; the only place the loop waits for the GPU."""
    w, state = run.window, run.state
    assert w.loss_sum is not None
    local_loss, norm = torch.stack([w.loss_sum.float(), grad_norm.float()]).tolist()
    loss_sum = run.ranks.all_sum([local_loss])[0]
    seconds = max(1e-9, time.perf_counter() - w.started - w.paused)
    state.loss_sum += loss_sum
    state.loss_tokens += w.learned
    per_step = w.process_seconds() / max(1, w.process_steps)
    fields: dict[str, Any] = {
        "step": state.step,
        "max_steps": run.max_steps,
        "epoch": round(state.step / run.layout.steps_per_epoch, 4),
        "loss": loss_sum / max(1, w.learned),
        "learning_rate": run.last_lr,
        "grad_norm": norm,
        "tokens_seen": state.tokens_seen,
        "tokens_per_s": round(w.tokens / seconds, 1),
        "elapsed_s": round(state.elapsed_s, 2),
        "eta_s": round(per_step * (run.max_steps - state.step), 1),
    }
    if run.where.device.type == "cuda":
        fields["gpu_mem_gb"] = round(torch.cuda.max_memory_allocated(run.where.device) / 2**30, 2)
    run.reporter.emit("progress", **fields)
    if not w.reported:  # once per process, for whoever reads the log rather than the events
        w.reported = True
        run.reporter.log(
            f"step {state.step}/{run.max_steps}: about {_duration(fields['eta_s'])} to go"
        )
    w.reset()


def _eval_share(run: Run, batches: list[list[int]]) -> list[tuple[list[int], bool]]:
    """This rank's eval micro-batches, each with whether it counts. With FSDP every forward
    is a collective, so a rank with fewer batches repeats one that does not count."""
    ranks = run.ranks
    mine = [(rows, True) for rows in batches[ranks.rank :: ranks.world_size]]
    if run.parallel == "fsdp":
        rounds = -(-len(batches) // ranks.world_size)
        mine += [(batches[0], False)] * (rounds - len(mine))
    return mine


@torch.no_grad()
def evaluate(run: Run) -> None:
    """Mean loss per learned token on the eval rows, shared out over the ranks."""
    if not run.evalset or not len(run.evalset):
        return
    started = time.perf_counter()
    inner = sharding.for_eval(run.module, run.parallel)
    inner.eval()
    lengths = [run.evalset.row_tokens(r) for r in range(len(run.evalset))]
    batches = group_by_length(lengths, run.opts.batch_size * run.opts.max_length)
    loss_sum, learned = 0.0, 0
    for rows, counted in _eval_share(run, batches):
        with run.autocast():
            value = inner(**run.to_device(run.evalset.collate(rows))).item()
        if counted:
            loss_sum += value
            learned += run.evalset.count(rows)[1]
    inner.train()
    loss_sum, learned_f = run.ranks.all_sum([loss_sum, float(learned)])
    loss = loss_sum / max(1.0, learned_f)
    perplexity = math.exp(loss) if loss < 50 else None
    run.reporter.emit(
        "eval",
        step=run.state.step,
        eval_loss=loss,
        eval_perplexity=perplexity,
        eval_tokens=int(learned_f),
    )
    run.window.paused += time.perf_counter() - started


def save_checkpoint(run: Run) -> None:
    started = time.perf_counter()
    path = checkpoint.save(
        run.output,
        run.model,
        run.optimizer,
        run.scheduler,
        run.state,
        run.ranks,
        run.opts.save_total_limit,
    )
    run.last_checkpoint = path
    run.reporter.emit("checkpoint", step=run.state.step, path=str(path))
    run.window.paused += time.perf_counter() - started


def _after_step(run: Run, grad_norm: torch.Tensor) -> None:
    opts, step = run.opts, run.state.step
    last = step == run.max_steps
    if step % opts.log_steps == 0 or last or step == 1:
        report_progress(run, grad_norm)
    eval_every = opts.eval_steps if opts.eval_steps > 0 else opts.save_steps
    if step % eval_every == 0 or last:
        evaluate(run)
    if step % opts.save_steps == 0 or last:
        save_checkpoint(run)


def _tick(run: Run) -> None:
    """Add the wall time since the last tick to the run's elapsed time (kept across restarts)."""
    now = time.perf_counter()
    run.state.elapsed_s += now - run.clock
    run.clock = now


def train(run: Run, stop_requested: Callable[[], bool]) -> bool:
    """Train up to max_steps; False when stopped early by a signal (after a checkpoint)."""
    run.window, run.clock = Window(), time.perf_counter()
    for step, micro, learned, tokens in steps(run):
        run.last_lr = run.optimizer.param_groups[0]["lr"]
        loss_sum, grad_norm = train_step(run, micro, learned, step)
        run.window.add(loss_sum, learned, tokens)
        run.state.step += 1
        run.state.tokens_seen += tokens
        _tick(run)
        _after_step(run, grad_norm)
        if stop_requested() and run.state.step < run.max_steps:
            if run.state.step % run.opts.save_steps:
                save_checkpoint(run)
            return False
    return True
