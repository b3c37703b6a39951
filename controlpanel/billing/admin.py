from django.contrib import admin

from controlpanel.billing.models import Line, Period


@admin.register(Period)
class PeriodAdmin(admin.ModelAdmin):
    """Read-only here: months move open → closed → locked through billing.services only."""

    list_display = readonly_fields = ("month", "state", "closed_at", "closed_by", "locked_at")

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Line)
class LineAdmin(PeriodAdmin):
    """The ledger, to read: written by billing.services.run_record only."""

    list_display = readonly_fields = ("period", "of_period", "project", "run", "minutes")
    list_filter = ("period", "project")
