"""A flavor's GPU resource: whole GPUs (`nvidia.com/gpu`) or one MIG profile's slices
(`nvidia.com/mig-<N>g.<M>gb`), nothing else; a refusal names the field and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from controlpanel.engine.forms import unit_of
from controlpanel.flavors.models import Flavor
from deploy.gpu_resources import is_gpu_resource, mig_profile

pytestmark = pytest.mark.django_db


def flavor(**changes: Any) -> Flavor:
    values: dict[str, Any] = {
        "name": "a100-mig",
        "gpu_model": "A100",
        "gpus_per_unit": 1,
        "vcpu_per_unit": 8,
        "memory_gib_per_unit": 60,
        "gpu_memory_gib": 80,
    }
    return Flavor(**(values | changes))


@pytest.mark.parametrize(
    ("resource", "profile"),
    [
        ("nvidia.com/gpu", ""),
        ("nvidia.com/mig-1g.5gb", "1g.5gb"),
        ("nvidia.com/mig-1g.10gb", "1g.10gb"),
        ("nvidia.com/mig-3g.40gb", "3g.40gb"),
        ("nvidia.com/mig-7g.141gb", "7g.141gb"),
    ],
)
def test_whole_gpus_and_mig_profiles_are_taken(resource: str, profile: str) -> None:
    found = flavor(resource_key=resource)
    found.full_clean()
    found.save()
    assert Flavor.objects.get(name="a100-mig").to_spec().resource_key == resource
    assert mig_profile(resource) == profile and is_gpu_resource(resource)


@pytest.mark.parametrize(
    "resource",
    [
        "cpu",
        "memory",
        "amd.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-",
        "nvidia.com/mig-0g.5gb",
        "nvidia.com/mig-1g.10GB",
        "nvidia.com/mig-1g.10gb.me",
        "nvidia.com/mig-1g.10gb\n",
        "nvidia.com/mig-1g.10gb/x",
        "example.com/mig-1g.10gb",
        "nvidia.com/mig-10g.5gb",
    ],
)
def test_anything_else_is_refused_under_its_field(resource: str) -> None:
    with pytest.raises(ValidationError) as refused:
        flavor(resource_key=resource).full_clean()
    errors = refused.value.message_dict
    assert list(errors) == ["resource_key"]
    assert errors["resource_key"][-1].endswith(
        "Use nvidia.com/gpu or a MIG profile such as nvidia.com/mig-1g.10gb."
    )
    assert not is_gpu_resource(resource)
    assert not Flavor.objects.filter(name="a100-mig").exists()


def test_a_mig_unit_is_one_slice() -> None:
    with pytest.raises(ValidationError) as refused:
        flavor(resource_key="nvidia.com/mig-1g.10gb", gpus_per_unit=2).full_clean()
    assert refused.value.message_dict == {
        "gpus_per_unit": ["A MIG flavor's unit is one slice: set GPUs per unit to 1."]
    }
    flavor(resource_key="nvidia.com/gpu", gpus_per_unit=2).full_clean()


def test_the_submission_form_says_a_unit_is_a_slice() -> None:
    assert unit_of(flavor(resource_key="nvidia.com/mig-3g.40gb")) == (
        "1× A100 MIG 3g.40gb, 8 vCPU, 60 GiB"
    )
    assert unit_of(flavor()) == "1× A100 80 GB, 8 vCPU, 60 GiB"
