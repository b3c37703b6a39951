"""The GPU resources a flavor may ask for: whole GPUs (`nvidia.com/gpu`) or, where the NVIDIA
GPU operator partitions GPUs with MIG under its "mixed" strategy, the slices of one MIG profile
(`nvidia.com/mig-1g.10gb`, `nvidia.com/mig-3g.40gb`): each profile is its own extended
resource on the node, counted apart from whole GPUs."""

from __future__ import annotations

import re

from deploy.types import GPU_RESOURCE_KEY

MIG_PREFIX = "nvidia.com/mig-"
# <compute slices>g.<memory GB>gb, as the device plugin names them (1g.5gb to 7g.141gb).
MIG_RESOURCE = re.compile(r"nvidia\.com/mig-([1-9])g\.([1-9][0-9]{0,3})gb")
RESOURCE_RULE = "Use nvidia.com/gpu or a MIG profile such as nvidia.com/mig-1g.10gb."


def mig_profile(resource: str) -> str:
    """The MIG profile a resource name counts (`1g.10gb`), "" for whole GPUs or anything else."""
    if MIG_RESOURCE.fullmatch(resource) is None:
        return ""
    return resource.removeprefix(MIG_PREFIX)


def is_gpu_resource(resource: str) -> bool:
    """Whether a flavor may ask for `resource`: whole GPUs or one MIG profile's slices."""
    return resource == GPU_RESOURCE_KEY or bool(mig_profile(resource))
