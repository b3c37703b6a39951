"""Whether a flavor can ever run where this panel runs workloads: on the local backend that is
this one machine, whose GPUs are known (`Capacity.gpus`), so a GPU flavor it has none of can
never start and is refused at submit (every kind's validator, through `check_flavor` and
`check_gpu`) and shown disabled in the forms. A cluster's scheduler decides for itself: on the
Kubernetes backend (`capacity()` is None) every flavor may run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from controlpanel.flavors.models import Flavor
from deploy.gpu_resources import mig_profile
from deploy.local.gpus import gpu_matches

HERE = "This panel runs workloads on this machine"
READ_EVERY_S = 30.0
# The last reading: the backend it came from (a test may swap it), when, and the GPUs.
_read: dict[int, tuple[Any, float, tuple[str, ...] | None]] = {}


def machine_gpus() -> tuple[str, ...] | None:
    """The product names of the machine's GPUs (one per device), or None on a cluster.

    Read from the backend at most every READ_EVERY_S per process (a form's GET asks too, and
    on a machine with GPUs the reading is NVML's or nvidia-smi's)."""
    if settings.COMPUTE_BACKEND != "local":
        return None  # without building a cluster client just to be told so
    # Deferred: backend.py imports the validators that import this module.
    from controlpanel.engine.backend import get_backend

    backend = get_backend()
    kept = _read.get(id(backend))
    if kept is not None and kept[0] is backend and time.monotonic() - kept[1] < READ_EVERY_S:
        return kept[2]
    capacity = backend.capacity()
    gpus = None if capacity is None else capacity.gpus
    _read.clear()
    _read[id(backend)] = (backend, time.monotonic(), gpus)
    return gpus


def matching_gpus(flavor: Flavor, gpus: Iterable[str]) -> list[str]:
    spec = flavor.to_spec()
    return [name for name in gpus if gpu_matches(spec, name)]


def flavor_problem(flavor: Flavor, gpus: tuple[str, ...] | None) -> str | None:
    """Why `flavor` can never start on a machine with these GPUs (None: it can, or a cluster
    decides)."""
    if gpus is None or runs_on(flavor, gpus):
        return None
    if mig_profile(flavor.resource_key):
        return (
            f"{flavor.name} asks for MIG slices ({flavor.resource_key}), which only a "
            f"Kubernetes cluster hands out. {HERE}; {_instead(flavor, gpus)}"
        )
    if not gpus:
        return f"{HERE}, which has no GPU; {_instead(flavor, gpus)}"
    return (
        f"{HERE}, which has no {flavor.gpu_model or 'such'} GPU (it has "
        f"{_said(gpus)}); {_instead(flavor, gpus)}"
    )


def runs_on(flavor: Flavor, gpus: tuple[str, ...] | None) -> bool:
    """Whether one unit of `flavor` can start on a machine with these GPUs (None: a cluster)."""
    if gpus is None or not flavor.is_gpu:
        return True
    return not mig_profile(flavor.resource_key) and bool(matching_gpus(flavor, gpus))


def units_problem(flavor: Flavor, units: int, gpus: tuple[str, ...] | None) -> str | None:
    """Why `units` of a flavor that runs here can never start at once (None: they can)."""
    if gpus is None or not flavor.is_gpu or not runs_on(flavor, gpus):
        return None
    has = len(matching_gpus(flavor, gpus))
    wanted = units * flavor.gpus_per_unit
    if wanted <= has:
        return None
    most = has // flavor.gpus_per_unit
    return (
        f"{flavor.name} × {units} needs {wanted} {flavor.gpu_model} GPUs at once; this machine, "
        f"where this panel runs workloads, has {has}: ask for at most {most} "
        f"unit{'s' if most != 1 else ''}."
    )


def unrunnable(flavors: Iterable[Flavor]) -> dict[str, str]:
    """The flavors among these that can never run here, by name, with the reason."""
    gpus = machine_gpus()
    problems = {flavor.name: flavor_problem(flavor, gpus) for flavor in flavors}
    return {name: problem for name, problem in problems.items() if problem}


def offer_note(gpus: tuple[str, ...]) -> str:
    """What a form says under its flavors when some are disabled."""
    if not gpus:
        return f"{HERE}, which has no GPU: its GPU flavors are shown disabled."
    return f"{HERE} ({_said(gpus)}): the flavors it cannot run are shown disabled."


def _instead(flavor: Flavor, gpus: tuple[str, ...]) -> str:
    """What to choose instead: the enabled flavors that run here, GPU ones first."""
    others = [f for f in Flavor.objects.filter(enabled=True) if f.pk != flavor.pk]
    gpu = [f.name for f in others if f.is_gpu and runs_on(f, gpus)]
    cpu = [f.name for f in others if not f.is_gpu]
    if gpu and cpu:
        return f"choose {_names(gpu)}, or a CPU flavor such as {_names(cpu)}."
    if gpu:
        return f"choose {_names(gpu)}."
    if cpu:
        return f"choose a CPU flavor such as {_names(cpu)}."
    return "no enabled flavor runs here: a site admin adds a CPU flavor in the admin's Flavors."


def _names(names: list[str]) -> str:
    shown = names[:3]
    return ", ".join(shown[:-1]) + (" or " if len(shown) > 1 else "") + shown[-1]


def _said(gpus: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for name in gpus:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{count} × {name}" for name, count in counts.items())
