from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from controlpanel.accounts.models import ApiToken, User

admin.site.register(User, UserAdmin)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "user",
        "hint",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    readonly_fields = ["digest", "hint", "created_at", "last_used_at"]
    search_fields = ["name", "user__username"]
