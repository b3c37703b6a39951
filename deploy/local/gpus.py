"""Which GPUs this machine has (NVML, else nvidia-smi, else none) and which a run may use."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from deploy.gpu_resources import mig_profile
from deploy.types import FlavorSpec

# GPU feature discovery's node label: the NVML product name with spaces turned into '-'
# (`-SHARED` is appended when the GPU is time-sliced).
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class Gpu:
    """One device: its index (for CUDA_VISIBLE_DEVICES) and its product name."""

    index: int
    name: str


def detect_gpus() -> list[Gpu]:
    """The machine's GPUs; empty when there is no NVIDIA driver."""
    return _nvml() or _nvidia_smi()


def _nvml() -> list[Gpu]:
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: nvidia-ml-py
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        names = [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
        ]
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return []
    return [Gpu(i, n.decode() if isinstance(n, bytes) else str(n)) for i, n in enumerate(names)]


def _nvidia_smi() -> list[Gpu]:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    try:
        output = subprocess.run(
            [binary, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in output.splitlines():
        index, _, name = line.partition(",")
        if index.strip().isdigit():
            gpus.append(Gpu(int(index), name.strip()))
    return gpus


def pick_gpus(
    flavor: FlavorSpec, units: int, gpus: Iterable[Gpu], busy: set[int]
) -> tuple[list[int] | None, str]:
    """Indices for the run, or None with the reason it has to wait."""
    wanted = flavor.gpus_per_unit * units
    if wanted == 0:
        return [], ""
    if mig_profile(flavor.resource_key):
        # Whole GPUs only here: a MIG slice is a device the GPU operator's plugin hands out.
        return None, (
            f"{flavor.name} asks for MIG slices ({flavor.resource_key}): they run on the "
            "Kubernetes backend only, this machine hands out whole GPUs"
        )
    matching = [gpu for gpu in gpus if gpu_matches(flavor, gpu.name)]
    free = [gpu.index for gpu in matching if gpu.index not in busy]
    if len(free) >= wanted:
        return free[:wanted], ""
    if not matching:
        return None, (
            f"this machine has no {flavor.gpu_model} GPU ({flavor.name} needs {wanted}); "
            "run it on the Kubernetes backend or pick the CPU flavor"
        )
    return None, f"waiting for {wanted} free {flavor.gpu_model} GPU(s): {len(free)} free here"


def gpu_matches(flavor: FlavorSpec, name: str) -> bool:
    """Whether a GPU named `name` (by NVML) is of the flavor's model: the product its node
    selector pins when it has one, exactly as on a cluster; else the model as a whole word
    of the name, so L4 is not an L40S and A10 not an A100."""
    product = flavor.node_selector.get(PRODUCT_LABEL)
    if product:
        wanted = product.removesuffix("-SHARED")
        return "-".join(name.split()).casefold() == wanted.casefold()
    model = flavor.gpu_model.strip()
    if not model:
        return False
    pattern = rf"(?<![0-9A-Za-z]){re.escape(model)}(?![0-9A-Za-z])"
    return re.search(pattern, name, flags=re.IGNORECASE) is not None
