from django.contrib import admin

from controlpanel.projects.models import QUOTA_FIELDS, Membership, Project
from controlpanel.queues.admin import ProjectQueueInline


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "slug",
        *QUOTA_FIELDS,
        "monthly_budget",
        "created_at",
    ]
    search_fields = ["name", "slug"]
    inlines = [MembershipInline, ProjectQueueInline]
    # Managers see and rotate the webhook secret on the project page; it is encrypted at rest.
    exclude = ["webhook_secret"]
