"""Several processes, on one node or many: who is who, and how they talk.

A run is one process, or a group started by torchrun (see launch.py and README "Several GPUs
and nodes"): torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, and `init()` joins the group over NCCL on GPUs or gloo on CPUs. Every rank derives
the same data order from the seed and takes its share of each step's micro-batches.

One rank, the *writer*, alone prints events and writes files (checkpoints, adapter,
metrics): local rank 0 of node 0, node being the pod's JOB_COMPLETION_INDEX (Kubernetes sets it
in an indexed Job's pods, JobSet's included) or else torchrun's GROUP_RANK. torchrun's c10d
rendezvous numbers nodes by host name, not by pod index, so the writer is elected rather than
assumed to be rank 0: the panel can then push outputs from pod 0, whatever the rendezvous did.
Other nodes never read the output directory: what a resume needs is read by the writer and
broadcast (`broadcast_tree`).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

# A collective waits this long for the slowest rank: the writer alone saves checkpoints and
# merges the adapter into the model (minutes for a 70B model) while the others wait for it.
# A rank that dies is noticed by torchrun (its process ends), not by this timeout.
COLLECTIVE_TIMEOUT = timedelta(minutes=60)


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks (0 of 1 when not distributed)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    main: int = 0  # global rank of the writer
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # collectives'

    @property
    def is_main(self) -> bool:
        return self.rank == self.main

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (one collective for the whole list)."""
        if not self.distributed:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def all_max(self, value: float) -> float:
        """The largest `value` over ranks (the slowest rank's time, say)."""
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def broadcast_object(self, obj: Any) -> Any:
        """The writer's `obj` on every rank (small picklable values: a step, a path, a
        message; never file content, which goes through broadcast_tree as tensors)."""
        if not self.distributed:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=self.main, device=self.device)
        return box[0]


def under_torchrun() -> bool:
    """Whether torchrun (or a launcher like it) started this process as one of a group."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


def node_index() -> int:
    env = os.environ
    return int(env.get("JOB_COMPLETION_INDEX") or env.get("GROUP_RANK") or 0)


def ranks_from_env() -> Ranks:
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1"))
    return Ranks(
        rank=int(env.get("RANK", "0")),
        local_rank=int(env.get("LOCAL_RANK", "0")),
        world_size=world,
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
    )


def backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init(ranks: Ranks) -> Ranks:
    """Join the group (when there is one) and elect the writer; returns the complete Ranks."""
    if not ranks.distributed:
        return ranks
    if backend() == "nccl":
        torch.cuda.set_device(ranks.local_rank)
        device = torch.device("cuda", ranks.local_rank)
        dist.init_process_group("nccl", device_id=device, timeout=COLLECTIVE_TIMEOUT)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    keys: list[Any] = [None] * ranks.world_size
    dist.all_gather_object(keys, (node_index(), ranks.local_rank, ranks.rank))
    main = min(keys)[2]
    return Ranks(
        ranks.rank, ranks.local_rank, ranks.world_size, ranks.local_world_size, main, device
    )


def shutdown(ranks: Ranks) -> None:
    if ranks.distributed and dist.is_initialized():
        dist.destroy_process_group()


def exit_rank(code: int) -> NoReturn:
    """End a torchrun rank whose work is done, without the interpreter's finalization: there
    gloo's threads could still free work that references Python objects and abort a finished
    rank (SIGABRT, "terminate called without an active exception", ~1 run in 10 of two ranks
    here). Its output is flushed first; files it wrote are closed by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def _skeleton(tree: Any) -> Any:
    """The tree with each tensor replaced by its (shape, dtype): what the others allocate."""
    if isinstance(tree, torch.Tensor):
        return ("__tensor__", tuple(tree.shape), str(tree.dtype)[6:])
    if isinstance(tree, dict):
        return {k: _skeleton(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_skeleton(v) for v in tree)
    return tree


def _fill(skeleton: Any, ranks: Ranks, source: Any) -> Any:
    """The tree with every tensor received from the writer (or sent, on the writer)."""
    if isinstance(skeleton, tuple) and skeleton[:1] == ("__tensor__",):
        _, shape, dtype = skeleton
        t = source.to(ranks.device) if ranks.is_main else None
        if t is None:
            t = torch.empty(shape, dtype=getattr(torch, dtype), device=ranks.device)
        dist.broadcast(t, src=ranks.main)
        return t.cpu()
    if isinstance(skeleton, dict):
        return {
            k: _fill(v, ranks, source[k] if ranks.is_main else None) for k, v in skeleton.items()
        }
    if isinstance(skeleton, list | tuple):
        parts = [
            _fill(v, ranks, source[i] if ranks.is_main else None) for i, v in enumerate(skeleton)
        ]
        return type(skeleton)(parts)
    return skeleton


def broadcast_tree(ranks: Ranks, tree: Any) -> Any:
    """The writer's nested dicts/lists of tensors and plain values, on every rank (on CPU).

    The structure travels as a small pickled skeleton; tensors go through the collective
    backend one by one, so a large optimizer state is never one big pickle."""
    if not ranks.distributed:
        return tree
    skeleton = ranks.broadcast_object(_skeleton(tree) if ranks.is_main else None)
    return _fill(skeleton, ranks, tree)
