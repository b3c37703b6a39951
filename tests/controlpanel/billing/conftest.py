"""The billing tests' data: two flavors with prices, and January 2025 of project alpha (and
of beta), billed by the receivers from real runs."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings

from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project
from tests.fixtures.panel import UserFactory, add_member

CUR = settings.CURRENCY
SINCE = datetime(2024, 12, 1, tzinfo=UTC)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def gpu(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="test-gpu", gpu_model="H100", gpus_per_unit=1, vcpu_per_unit=8, memory_gib_per_unit=64
    )
    FlavorPrice.objects.create(flavor=flavor, valid_from=SINCE, price_per_hour=Decimal("2.8000"))
    return flavor


@pytest.fixture
def cpu(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="test-cpu", gpus_per_unit=0, vcpu_per_unit=1, memory_gib_per_unit=4
    )
    FlavorPrice.objects.create(flavor=flavor, valid_from=SINCE, price_per_hour=Decimal("0.6000"))
    return flavor


def ran(
    project: Project,
    owner: Any,
    name: str,
    kind: str,
    flavor: Flavor,
    units: int,
    start: datetime,
    end: datetime | None,
) -> Workload:
    """A workload with one run; the billing receivers write its lines as it is saved."""
    workload = Workload.objects.create(
        project=project, owner=owner, name=name, kind=kind, image="x/y:1", flavor=flavor, gpu=units
    )
    JobRun.objects.create(
        uid=f"pod-{name}",
        job=workload,
        project=project,
        run=1,
        flavor=flavor,
        units=units,
        started_at=start,
        finished_at=end,
    )
    return workload


@pytest.fixture
def january(
    project: Project, other_project: Project, owner: Any, member: Any, gpu: Flavor, cpu: Flavor
) -> dict[str, Workload]:
    """January 2025 of project alpha, worked by hand (2.80/h GPU, 0.60/h CPU):
    - train-a (owner, job): 10:00:00 → 10:30:30 = 31 started minutes × 2 units on test-gpu:
      62 unit-minutes × 2.80 = 173.6 price-minutes (2.893… EUR), 62 GPU-minutes;
    - prep (owner, job): 60 minutes × 1 unit on test-cpu: 36 price-minutes (0.60 EUR), no GPU;
    - nb-b (member, notebook): 31 Jan 23:50 → 1 Feb 00:10 on test-gpu × 1: 10 minutes in
      January (28 price-minutes, 0.466… EUR), 10 in February.
    January: 237.6 price-minutes = 3.96 EUR (rounded once), 72 GPU-minutes = 1.20 GPU-hours.
    And project beta's run, which alpha's manager never sees."""
    other = UserFactory(username="beta-user")
    add_member(other_project, other)
    return {
        "train-a": ran(
            project,
            owner,
            "train-a",
            "job",
            gpu,
            2,
            at("2025-01-10T10:00"),
            at("2025-01-10T10:30:30"),
        ),
        "prep": ran(
            project, owner, "prep", "job", cpu, 1, at("2025-01-15T08:00"), at("2025-01-15T09:00")
        ),
        "nb-b": ran(
            project,
            member,
            "nb-b",
            "notebook",
            gpu,
            1,
            at("2025-01-31T23:50"),
            at("2025-02-01T00:10"),
        ),
        "beta-run": ran(
            other_project,
            other,
            "beta-run",
            "job",
            gpu,
            4,
            at("2025-01-12T00:00"),
            at("2025-01-12T05:00"),
        ),
    }
