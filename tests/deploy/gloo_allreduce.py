"""A tiny gloo program for the local backend's jobs of several nodes (test_local_nodes.py),
run under torchrun: every rank says what torchrun gave it and the sum of an all-reduce.
`FAIL_NODE=i`: node i's rank exits 3 after the all-reduce (every attempt); `HOLD_S`: ranks
wait that long before ending."""

import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
env = {k: os.environ.get(k, "") for k in ("MASTER_ADDR", "GROUP_RANK", "JOB_COMPLETION_INDEX")}
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "")
print(f"rank {rank} of {world} sum {value.item():g} restart {restart} {env}", flush=True)
if os.environ.get("FAIL_NODE") == os.environ.get("GROUP_RANK"):
    sys.exit(3)
time.sleep(float(os.environ.get("HOLD_S", "0")))
dist.destroy_process_group()
