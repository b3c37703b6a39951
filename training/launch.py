"""Start the preset as a group of processes: torchrun's agent, run inside this process.

`python -m training.finetune ...` becomes torchrun's agent (torch.distributed.elastic) when
- the environment holds torchrun's own options as PET_* variables (PET_NNODES,
  PET_NPROC_PER_NODE, PET_NODE_RANK, PET_RDZV_ENDPOINT, ...: torchrun reads every option from
  PET_<OPTION>), which is how the panel asks for several processes or nodes; or
- more than one GPU is visible (`--standalone`, one process per GPU; `--no-distributed` stays
  one process).
It never does when it already is one of a group (LOCAL_RANK set): an explicit
`torchrun ... -m training.finetune ...` runs as is.

Why in-process rather than exec'ing torchrun: the dataset is checked once before any worker
starts, and the exit status says what happened. torchrun itself ends with a traceback and
status 1 when SIGTERM stops it; here the group's end is mapped to the preset's codes: 0, 143
after SIGTERM (every rank checkpointed first), else the first failed rank's own code.
"""

from __future__ import annotations

import os
import sys

from training.distributed import under_torchrun

TORCHRUN_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE")


def torchrun_args(allowed: bool) -> list[str] | None:
    """torchrun's options for this run, or None to go on as a single process."""
    if under_torchrun():
        return None
    if any(os.environ.get(name) for name in TORCHRUN_ENV):
        return []  # torchrun reads PET_* itself
    if not allowed:
        return None
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["--standalone", f"--nproc-per-node={n}"] if n > 1 else None


def _threads_per_process(nproc: int) -> None:
    """On CPU, share this pod's CPU budget between its local processes (torchrun would give
    each one thread). An explicit OMP_NUM_THREADS is kept."""
    import torch

    from training.modeling import cpu_budget

    if "OMP_NUM_THREADS" not in os.environ and not torch.cuda.is_available():
        os.environ["OMP_NUM_THREADS"] = str(max(1, cpu_budget() // max(1, nproc)))


def _exit_code(code: int) -> int:
    """A worker's exit code as a shell reports it (killed by a signal: 128 + its number)."""
    return 128 - code if code < 0 else code or 1


def run_group(options: list[str], argv: list[str]) -> int:
    """Run the group to its end with torchrun `options` and the preset's `argv`."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # The agent's shared TCPStore outlives a restart of the group, and the restarted ranks
    # then read the dead ones' addresses from it (pytorch/pytorch#135712, #167288): each
    # round gets a store of its own instead.
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    args = parse_args([*options, "--module", "training.finetune", *argv])
    nproc = args.nproc_per_node
    _threads_per_process(int(nproc) if str(nproc).isdigit() else 1)
    sys.stdout.flush()
    try:
        run(args)
    except SignalException as exc:
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        _rank, failure = exc.get_first_failure()
        return _exit_code(failure.exitcode)
    return 0
