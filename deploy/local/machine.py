"""This machine's cores and memory, which the local backend's jobs share (`Capacity`)."""

from __future__ import annotations

import os
from pathlib import Path

from deploy.types import Capacity

MEMINFO = Path("/proc/meminfo")


def machine_capacity(*, cpus: int = 0, memory_gib: int = 0) -> Capacity:
    """The cores this process may run on and the machine's memory; `cpus` or `memory_gib`
    (when not 0) replace what is detected, e.g. in a container whose limits are lower."""
    millicpu = cpus * 1000 if cpus else _cpus() * 1000
    memory_mib = memory_gib * 1024 if memory_gib else _memory_mib()
    return Capacity(millicpu=millicpu, memory_mib=memory_mib)


def _cpus() -> int:
    # The affinity mask, not os.cpu_count(): taskset or a cpuset may give us fewer cores.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _memory_mib() -> int:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024  # kB
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
