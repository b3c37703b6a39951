"""Pack examples into sequences of at most max_length tokens (best-fit decreasing).

Padding is compute spent on nothing: on a chat dataset whose examples vary from 50 to 2000
tokens, padding each batch to its longest example wastes a third or more of the FLOPs. Packing
fills each sequence with whole examples instead; position ids restart at every example, which
transformers turns into a block-diagonal causal mask (sdpa, eager) or variable-length
FlashAttention calls, so packed examples never attend to each other.
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
    """One example per sequence (--no-packing)."""
    return [[i] for i in range(n)]


@dataclass(frozen=True)
class Layout:
    """How one epoch's sequences are cut into micro-batches and optimizer steps.

    Every rank derives the same order from the seed, so no rank needs to ask another which
    data comes next, and a resumed run finds its place from the step number alone.
    """

    num_rows: int
    batch_size: int
    grad_accum: int
    world_size: int
    seed: int

    @property
    def rows_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.world_size

    @property
    def steps_per_epoch(self) -> int:
        return max(1, -(-self.num_rows // self.rows_per_step))

    def epoch_order(self, epoch: int) -> list[int]:
        """This epoch's row order, wrapped around so that every step is full on every rank."""
        order = list(range(self.num_rows))
        rng = random.Random(self.seed * 1_000_003 + epoch)  # noqa: S311 (reproducible, not secret)
        rng.shuffle(order)
        need = self.steps_per_epoch * self.rows_per_step
        return [order[i % len(order)] for i in range(need)]

    def step_batches(self, order: list[int], step_in_epoch: int) -> list[list[list[int]]]:
        """All micro-batches (lists of row ids) of one step, for every rank: [rank][k]."""
        base = step_in_epoch * self.rows_per_step
        rows = order[base : base + self.rows_per_step]
        micro = [rows[j : j + self.batch_size] for j in range(0, len(rows), self.batch_size)]
        # micro-batch j goes to rank j % world_size: ranks interleave, as DistributedSampler does
        return [micro[r :: self.world_size] for r in range(self.world_size)]


def fill_ratio(rows: list[list[int]], examples: Sequence[Example], max_length: int) -> float:
    """Share of the packed sequences' capacity holding real tokens."""
    used = sum(len(examples[i].input_ids) for row in rows for i in row)
    return used / max(1, len(rows) * max_length)
