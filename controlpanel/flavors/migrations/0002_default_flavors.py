"""The default flavors of a new install (admins edit them afterwards)."""

from decimal import Decimal

from django.db import migrations

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
PRODUCT = "nvidia.com/gpu.product"

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


def seed(apps, schema_editor):
    Flavor = apps.get_model("flavors", "Flavor")
    FlavorPrice = apps.get_model("flavors", "FlavorPrice")
    for order, (name, model, product, vcpu, mem, gpu_mem, price) in enumerate(DEFAULTS):
        is_gpu = bool(model)
        flavor, created = Flavor.objects.get_or_create(
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
        if created:
            FlavorPrice.objects.create(
                flavor=flavor,
                valid_from="2020-01-01T00:00:00Z",
                price_per_hour=Decimal(price),
            )


class Migration(migrations.Migration):
    dependencies = [("flavors", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
