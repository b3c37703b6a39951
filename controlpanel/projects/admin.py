from django.contrib import admin

from controlpanel.projects.models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "slug",
        "gpu_quota",
        "cpu_quota",
        "memory_gib_quota",
        "pod_quota",
        "storage_gib_quota",
        "monthly_budget",
        "created_at",
    ]
    search_fields = ["name", "slug"]
    inlines = [MembershipInline]
    # Managers see and rotate the webhook secret on the project page; it is encrypted at rest.
    exclude = ["webhook_secret"]
