from django.contrib import admin

from controlpanel.notebooks.models import NotebookImage


@admin.register(NotebookImage)
class NotebookImageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The framework images notebooks may run, and the editors each serves."""

    list_display = ("label", "name", "image", "editors", "enabled", "order")
    list_editable = ("enabled", "order")
