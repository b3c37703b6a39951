"""How examples become micro-batches: packed rows, or batches grouped by length.

Padding is compute spent on nothing: on a chat dataset whose examples vary from 50 to 2000
tokens, padding random batches to their longest example wastes a third or more of the FLOPs.
Two cures, chosen by `--packing` (auto: by attention kernel):

- packing (`on`): whole examples fill rows of max_length (best-fit decreasing); position ids
  restart at every example, which transformers turns into variable-length FlashAttention calls
  (flash_attention_2: each example attends to itself only, at its own cost) or a block-diagonal
  mask (sdpa, eager: correct, but attention is paid over the whole row);
- grouping (`off`): one example per row, micro-batches of similar lengths up to the same token
  budget (batch_size x max_length), so padding stays small and attention is per example with
  any kernel.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass

from training.data.tokenize import Example


def pack(lengths: Sequence[int], max_length: int) -> list[list[int]]:
    """Groups of example indices whose lengths sum to at most max_length each.

    Best-fit decreasing: each example, longest first, goes into the fullest sequence that still
    has room. Free space is kept in a sorted list, so this is O(n log n) with a fast memmove,
    fine for millions of examples.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    free: list[tuple[int, int]] = []  # (room left, sequence index), sorted
    rows: list[list[int]] = []
    for i in order:
        need = min(lengths[i], max_length)
        k = bisect.bisect_left(free, (need, -1))
        if k == len(free):
            rows.append([i])
            room, row = max_length - need, len(rows) - 1
        else:
            room, row = free.pop(k)
            rows[row].append(i)
            room -= need
        if room > 0:
            bisect.insort(free, (room, row))
    return rows


def unpacked(n: int) -> list[list[int]]:
    """One example per row."""
    return [[i] for i in range(n)]


def group_by_length(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Micro-batches of examples of similar length, each at most `budget` tokens once padded
    to its longest example (always at least one example).

    Without a variable-length attention kernel, a packed row pays attention over its whole
    length for every token; examples batched with others of their own length pay only for
    themselves, and sorting keeps the padding small. Measured on CPU with sdpa: 1.2-2x the
    tokens/s of packing (bench/bench_finetune_cpu.py).
    """
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        # sorted ascending: example i is the longest of the batch once added
        if current and lengths[i] * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class Layout:
    """How an epoch's rows are cut into micro-batches and optimizer steps.

    Packed rows are shuffled each epoch and cut `batch_size` at a time; length-grouped
    micro-batches (`fixed`) are kept whole and shuffled as units. Every rank derives the same
    order from the seed, so no rank needs to ask another which data comes next, and a resumed
    run finds its place from the step number alone.
    """

    num_rows: int
    batch_size: int
    grad_accum: int
    world_size: int
    seed: int
    fixed: tuple[tuple[int, ...], ...] = ()

    @property
    def num_batches(self) -> int:
        return len(self.fixed) if self.fixed else -(-self.num_rows // self.batch_size)

    @property
    def batches_per_step(self) -> int:
        return self.grad_accum * self.world_size

    @property
    def steps_per_epoch(self) -> int:
        return max(1, -(-self.num_batches // self.batches_per_step))

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This epoch's micro-batches (lists of row ids), wrapped around so that every step
        has grad_accum micro-batches on every rank."""
        rng = random.Random(self.seed * 1_000_003 + epoch)  # noqa: S311 (reproducible, not secret)
        if self.fixed:
            order = list(range(len(self.fixed)))
            rng.shuffle(order)
            batches = [list(self.fixed[i]) for i in order]
        else:
            rows = list(range(self.num_rows))
            rng.shuffle(rows)
            batches = [rows[j : j + self.batch_size] for j in range(0, len(rows), self.batch_size)]
        need = self.steps_per_epoch * self.batches_per_step
        return [batches[i % len(batches)] for i in range(need)]

    def step_batches(self, batches: list[list[int]], step_in_epoch: int) -> list[list[list[int]]]:
        """The micro-batches of one step, for every rank: [rank][k] is a list of row ids."""
        base = step_in_epoch * self.batches_per_step
        micro = batches[base : base + self.batches_per_step]
        # micro-batch j goes to rank j % world_size: ranks interleave, as DistributedSampler does
        return [micro[r :: self.world_size] for r in range(self.world_size)]


def fill_ratio(rows: list[list[int]], examples: Sequence[Example], max_length: int) -> float:
    """Share of the packed sequences' capacity holding real tokens."""
    used = sum(len(examples[i].input_ids) for row in rows for i in row)
    return used / max(1, len(rows) * max_length)


def padded_ratio(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """Share of real tokens in length-grouped micro-batches once padded."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return real / max(1, padded)
