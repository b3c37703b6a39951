"""Several GPUs: relaunch under torchrun, then one process per GPU with DDP.

When more than one GPU is visible and we are not already under torchrun, `finetune` replaces
itself (exec, same pid, so the pod's signals still reach it) with
`python -m torch.distributed.run --standalone --nproc_per_node=N -m training.finetune <same args>`.
Every rank derives the same data order from the seed and takes every N-th micro-batch; rank 0
alone prints events and writes outputs. Single-node only (`--standalone`), which is what a
job with `--gpu N` on one node gets. Not exercised by the CPU tests.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks (0 of 1 when not distributed)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        """Element-wise sum over ranks (one collective for the whole list)."""
        if not self.distributed:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()


def ranks_from_env() -> Ranks:
    env = os.environ
    return Ranks(
        int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")), int(env.get("WORLD_SIZE", "1"))
    )


def gpus_to_launch(allowed: bool) -> int:
    """How many processes to relaunch with, or 0 to go on in this one."""
    if not allowed or "LOCAL_RANK" in os.environ or not torch.cuda.is_available():
        return 0
    n = torch.cuda.device_count()
    return n if n > 1 else 0


def relaunch(nproc: int, argv: list[str]) -> NoReturn:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "training.finetune",
        *argv,
    ]
    sys.stdout.flush()
    os.execv(sys.executable, command)  # noqa: S606 (exec keeps our pid: signals still reach us)


def init(ranks: Ranks) -> None:
    if ranks.distributed:
        torch.cuda.set_device(ranks.local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", ranks.local_rank))


def shutdown(ranks: Ranks) -> None:
    if ranks.distributed and dist.is_initialized():
        dist.destroy_process_group()
