from django.contrib import admin

from controlpanel.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: events are written by controlpanel.audit.record() only and never change."""

    list_display = ("at", "action", "actor_username", "project_slug", "target_type", "target_id")
    readonly_fields = (
        "at",
        "actor",
        "actor_username",
        "action",
        "project",
        "project_slug",
        "target_type",
        "target_id",
        "details",
        "ip",
        "request_id",
    )
    list_filter = ("action",)
    search_fields = ("actor_username", "project_slug", "action")
    date_hierarchy = "at"
    raw_id_fields = ()

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
