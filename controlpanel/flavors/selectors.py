from __future__ import annotations

from django.db.models import QuerySet

from controlpanel.flavors.models import Flavor


def flavors_enabled() -> QuerySet[Flavor]:
    return Flavor.objects.filter(enabled=True).prefetch_related("prices")


def flavor_by_name(*, name: str) -> Flavor | None:
    return Flavor.objects.filter(name=name, enabled=True).first()
