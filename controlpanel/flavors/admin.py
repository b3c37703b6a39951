from django.contrib import admin

from controlpanel.flavors.models import Flavor, FlavorPrice


class FlavorPriceInline(admin.TabularInline):
    model = FlavorPrice
    extra = 1
    ordering = ["-valid_from"]


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
