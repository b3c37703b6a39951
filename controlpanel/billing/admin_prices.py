"""The site admins' prices page (`/billing/prices/`): every flavor's price history, and a
new price from a date (billing.prices.price_add re-prices the minutes it covers)."""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.utils import timezone

from controlpanel.accounts.views import _form_errors
from controlpanel.billing import admin_selectors as reads
from controlpanel.billing import admin_tables as tables
from controlpanel.billing.admin_views import common_context
from controlpanel.billing.prices import price_add
from controlpanel.flavors.models import Flavor
from controlpanel.projects.access import site_admin_page

DATE_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d")


class PriceForm(forms.Form):
    """A flavor's new price from a date (UTC)."""

    flavor = forms.ModelChoiceField(
        queryset=Flavor.objects.order_by("sort_order", "name"),
        to_field_name="name",
        empty_label=None,
        error_messages={"invalid_choice": "No such flavor.", "required": "Choose a flavor."},
    )
    valid_from = forms.CharField(
        label="From (UTC)",
        max_length=20,
        help_text="YYYY-MM-DD (midnight UTC) or YYYY-MM-DD HH:MM. Minutes that start then or "
        "later are priced at the new price.",
        error_messages={"required": "Say from when the price applies, e.g. 2025-03-01."},
    )
    price_per_hour = forms.DecimalField(
        label=f"Price per unit-hour ({settings.CURRENCY})",
        max_digits=12,
        decimal_places=4,
        min_value=0,
        error_messages={"required": "Give the price per unit-hour, e.g. 2.8000."},
    )

    def clean_valid_from(self) -> datetime:
        text = self.cleaned_data["valid_from"].strip()
        for fmt in DATE_FORMATS:
            try:
                moment = datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
            if not reads.FIRST_YEAR <= moment.year <= reads.LAST_YEAR:
                raise ValidationError(f"The year must be {reads.FIRST_YEAR} to {reads.LAST_YEAR}.")
            return moment
        raise ValidationError(
            f"{text[:20]!r} is not a date: write YYYY-MM-DD or YYYY-MM-DD HH:MM (UTC), "
            "e.g. 2025-03-01 or 2025-03-01 12:00."
        )


@site_admin_page
def billing_prices(request: HttpRequest) -> HttpResponse:
    form = PriceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            version, repriced = price_add(
                flavor=data["flavor"],
                valid_from=data["valid_from"],
                price_per_hour=data["price_per_hour"],
            )
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(
                request,
                f"{version.flavor.name}: {version.price_per_hour} {settings.CURRENCY} per "
                f"unit-hour from {version.valid_from:%Y-%m-%d %H:%M} UTC; {repriced} "
                f"run{'s' if repriced != 1 else ''} priced again.",
            )
            return redirect("billing-prices")
    context = {
        "form": form,
        "table": tables.prices_table(reads.price_history(), timezone.now()),
        **common_context(),
    }
    return render(request, "billing/admin/prices.html", context, status=400 if form.errors else 200)


@site_admin_page
def billing_prices_csv(request: HttpRequest) -> HttpResponseBase:
    return tables.csv_response(
        tables.prices_table(reads.price_history(), timezone.now()), "flavor-prices.csv"
    )
