"""The Django admin's flavor page lists prices read-only: a price added or changed there used to
skip price_add's closed/locked-month checks (issue 25), so a closed month's invoice changed
under it. Prices move through /billing/prices/ only."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.forms.models import model_to_dict
from django.test import Client

from controlpanel.billing.services import period_close
from controlpanel.flavors.models import Flavor, FlavorPrice
from tests.fixtures.panel import logged_in

JAN = date(2025, 1, 1)


def _change_form(flavor: Flavor, prices: list[dict[str, str]], initial: int) -> dict[str, Any]:
    data = {k: v for k, v in model_to_dict(flavor).items() if v is not None and k != "id"}
    data |= {
        "prices-TOTAL_FORMS": str(len(prices)),
        "prices-INITIAL_FORMS": str(initial),
        "prices-MIN_NUM_FORMS": "0",
        "prices-MAX_NUM_FORMS": "1000",
    }
    for n, price in enumerate(prices):
        data |= {f"prices-{n}-{k}": v for k, v in price.items()}
    return data


def test_the_admin_cannot_add_or_change_a_price_in_a_closed_month(
    admin_user: Any, gpu: Flavor
) -> None:
    period_close(month=JAN, now=datetime(2025, 2, 1, 1, tzinfo=UTC))
    old = FlavorPrice.objects.get(flavor=gpu)
    client: Client = logged_in(admin_user)
    url = f"/admin/flavors/flavor/{gpu.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200 and b"/billing/prices/" in page.content
    existing = {
        "id": str(old.pk),
        "flavor": str(gpu.pk),
        "valid_from_0": "2024-12-01",
        "valid_from_1": "00:00:00",
        "price_per_hour": "0.0100",  # changed: would re-price December and January
    }
    new = {
        "flavor": str(gpu.pk),
        "valid_from_0": "2025-01-15",
        "valid_from_1": "00:00:00",
        "price_per_hour": "99.0000",
    }
    answer = client.post(url, _change_form(gpu, [existing, new], initial=1))
    assert answer.status_code in (200, 302)
    assert list(
        FlavorPrice.objects.filter(flavor=gpu).values_list("price_per_hour", flat=True)
    ) == [Decimal("2.8000")]


def test_the_flavor_page_shows_prices_without_a_field_to_change(
    admin_user: Any, gpu: Flavor
) -> None:
    page = logged_in(admin_user).get(f"/admin/flavors/flavor/{gpu.pk}/change/").content.decode()
    assert "2.8000" in page
    assert 'name="prices-0-price_per_hour"' not in page  # shown as text, not a field
    assert 'name="prices-MAX_NUM_FORMS" value="0"' in page  # no row can be added
