from django.contrib import admin
from django.http import HttpRequest

from controlpanel.flavors.models import Flavor, FlavorPrice


class FlavorPriceInline(admin.TabularInline):
    """The price history, to read. A price is added on /billing/prices/ (billing.prices.
    price_add), which refuses a date inside a closed or locked month and re-prices the minutes
    it covers; an inline row written here skipped both (issue 25)."""

    model = FlavorPrice
    extra = 0
    ordering = ["-valid_from"]
    fields = readonly_fields = ("valid_from", "price_per_hour")
    verbose_name_plural = "Prices (add one on /billing/prices/)"

    def has_add_permission(self, request: HttpRequest, obj: Flavor | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Flavor | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Flavor | None = None) -> bool:
        return False


@admin.register(Flavor)
class FlavorAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_model",
        "compute_capability",
        "gpus_per_unit",
        "resource_key",
        "vcpu_per_unit",
        "memory_gib_per_unit",
        "max_units",
        "enabled",
    ]
    list_editable = ["enabled"]
    inlines = [FlavorPriceInline]
