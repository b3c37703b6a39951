"""The default flavors of a new install (admins edit them afterwards)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
PRODUCT = "nvidia.com/gpu.product"
PRICES_FROM = "2020-01-01T00:00:00Z"

# name, gpu model, product label, vCPU, memory GiB, GPU memory GiB, price per unit-hour
DEFAULTS = [
    ("ai1-1-cpu", "", "", 1, 4, 0, "0.0400"),
    ("l4-1-gpu", "L4", "NVIDIA-L4", 22, 90, 24, "0.7500"),
    ("v100s-1-gpu", "V100S", "Tesla-V100S-PCIE-32GB", 13, 40, 32, "1.7600"),
    ("a100-1-gpu", "A100", "NVIDIA-A100-SXM4-80GB", 15, 180, 80, "2.7500"),
    ("l40s-1-gpu", "L40S", "NVIDIA-L40S", 15, 90, 48, "1.4000"),
    ("h100-1-gpu", "H100", "NVIDIA-H100-80GB-HBM3", 30, 200, 80, "2.8000"),
    ("h200-1-gpu", "H200", "NVIDIA-H200", 30, 240, 141, "3.6000"),
]
# The CUDA compute capability of each default GPU model.
CAPABILITIES = {
    "L4": "8.9",
    "V100S": "7.0",
    "A100": "8.0",
    "L40S": "8.9",
    "H100": "9.0",
    "H200": "9.0",
}


def fill_capabilities(flavor_model: Any) -> None:
    """Set the compute capability of GPU flavors whose model is a default one and that say none."""
    for model, capability in CAPABILITIES.items():
        flavor_model.objects.filter(gpu_model=model, compute_capability="").update(
            compute_capability=capability
        )


def ensure_default_flavors(flavor_model: Any, price_model: Any) -> None:
    """Create the defaults that are missing (models passed in: migrations use historical ones,
    which may predate later fields: those are filled by their own migrations)."""
    for order, (name, model, product, vcpu, mem, gpu_mem, price) in enumerate(DEFAULTS):
        is_gpu = bool(model)
        flavor, created = flavor_model.objects.get_or_create(
            name=name,
            defaults={
                "description": f"1 × {model} {gpu_mem} GB" if is_gpu else "CPU only",
                "gpu_model": model,
                "gpus_per_unit": 1 if is_gpu else 0,
                "vcpu_per_unit": vcpu,
                "memory_gib_per_unit": mem,
                "gpu_memory_gib": gpu_mem,
                "node_selector": {PRODUCT: product} if is_gpu else {},
                "tolerations": GPU_TOLERATION if is_gpu else [],
                "max_units": 4 if is_gpu else 12,
                "sort_order": order,
            },
        )
        if created and hasattr(flavor, "compute_capability"):
            flavor_model.objects.filter(pk=flavor.pk).update(
                compute_capability=CAPABILITIES.get(model, "")
            )
        if created:
            price_model.objects.create(
                flavor=flavor, valid_from=PRICES_FROM, price_per_hour=Decimal(price)
            )
