from django.contrib import admin

from controlpanel.served.models import AppImage


@admin.register(AppImage)
class AppImageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The images apps may run: an app's create names one of these (issue 25)."""

    list_display = ("label", "image", "enabled")
    list_editable = ("enabled",)
