"""The install's identity in the site admin area: read only (renewing it is a command that
says what follows, not a form)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from controlpanel.core.models import Installation


@admin.register(Installation)
class InstallationAdmin(admin.ModelAdmin):
    list_display = ("install_id", "created_at", "renewed_from")
    readonly_fields = ("install_id", "created_at", "renewed_from")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Installation | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Installation | None = None) -> bool:
        return False
