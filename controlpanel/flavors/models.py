from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from deploy.gpu_resources import RESOURCE_RULE, is_gpu_resource, mig_profile
from deploy.types import GPU_RESOURCE_KEY, FlavorSpec, Toleration

FLAVOR_NAME = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
    "Use lowercase letters, digits and hyphens, e.g. h100-1-gpu.",
)


COMPUTE_CAPABILITY = RegexValidator(r"^[0-9]{1,2}\.[0-9]$", "Write it as major.minor, e.g. 8.9.")


def validate_resource_key(value: str) -> None:
    """Whole GPUs or one MIG profile's slices: nothing else reaches a pod's limits."""
    if not is_gpu_resource(value):
        raise ValidationError(f"{value!r} is not a GPU resource. {RESOURCE_RULE}", code="invalid")


class Flavor(models.Model):
    """An admin-defined machine shape: one unit is `gpus_per_unit` GPUs of `gpu_model` plus
    vCPU and memory; where it may run (node selector, tolerations) and its dated prices."""

    name = models.CharField(max_length=40, unique=True, validators=[FLAVOR_NAME])
    description = models.CharField(max_length=200, blank=True)
    gpu_model = models.CharField(max_length=40, blank=True, help_text="Empty for CPU flavors.")
    gpus_per_unit = models.PositiveSmallIntegerField(default=1)
    vcpu_per_unit = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    memory_gib_per_unit = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    gpu_memory_gib = models.PositiveSmallIntegerField(default=0, help_text="Per GPU.")
    compute_capability = models.CharField(
        max_length=5,
        blank=True,
        validators=[COMPUTE_CAPABILITY],
        help_text="The GPU's CUDA compute capability (9.0 for H100): images built for newer "
        "GPUs only (the fine-tune image needs 7.5) are refused on older ones. Empty: unknown.",
    )
    node_selector = models.JSONField(default=dict, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    resource_key = models.CharField(
        max_length=60,
        default=GPU_RESOURCE_KEY,
        validators=[validate_resource_key],
        help_text="What one GPU of a unit is on the nodes: nvidia.com/gpu (whole GPUs), or a "
        "MIG profile's slices where the NVIDIA GPU operator runs the mixed strategy, e.g. "
        "nvidia.com/mig-1g.10gb (GPUs per unit then counts slices).",
    )
    max_units = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1)], help_text="Most units one job may ask for."
    )
    enabled = models.BooleanField(default=True)
    sort_order = models.PositiveSmallIntegerField(default=100)

    class Meta:
        ordering = ["sort_order", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # A CUDA process enumerates one MIG device, whatever the container is given.
        if mig_profile(self.resource_key) and self.gpus_per_unit != 1:
            raise ValidationError(
                {"gpus_per_unit": "A MIG flavor's unit is one slice: set GPUs per unit to 1."}
            )

    @property
    def is_gpu(self) -> bool:
        return self.gpus_per_unit > 0

    @property
    def capability(self) -> tuple[int, int] | None:
        """The compute capability as (major, minor), None when unknown or a CPU flavor."""
        if not self.is_gpu or not self.compute_capability:
            return None
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    def to_spec(self) -> FlavorSpec:
        return FlavorSpec(
            name=self.name,
            gpu_model=self.gpu_model,
            gpus_per_unit=self.gpus_per_unit,
            vcpu_per_unit=self.vcpu_per_unit,
            memory_gib_per_unit=self.memory_gib_per_unit,
            node_selector=dict(self.node_selector),
            tolerations=tuple(Toleration(**t) for t in self.tolerations),
            resource_key=self.resource_key,
        )

    def price_at(self, moment: datetime) -> Decimal | None:
        """The unit price per hour in effect at `moment`, or None before the first price.

        Reads `prices.all()`, so a list prefetching `flavor__prices` costs no query per row."""
        in_effect = [p for p in self.prices.all() if p.valid_from <= moment]
        if not in_effect:
            return None
        return max(in_effect, key=lambda p: p.valid_from).price_per_hour

    @property
    def current_price(self) -> Decimal | None:
        return self.price_at(timezone.now())


class FlavorPrice(models.Model):
    """A flavor's price per unit-hour from `valid_from` on. Prices are dated versions: a new
    price is a new row, so past minutes keep the rate that was in effect."""

    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="prices")
    valid_from = models.DateTimeField(default=timezone.now)
    price_per_hour = models.DecimalField(
        max_digits=12, decimal_places=4, validators=[MinValueValidator(Decimal("0"))]
    )

    class Meta:
        ordering = ["flavor", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["flavor", "valid_from"], name="one_price_per_instant")
        ]

    def __str__(self) -> str:
        return f"{self.flavor} {self.price_per_hour}/h from {self.valid_from:%Y-%m-%d}"
