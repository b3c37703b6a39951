from __future__ import annotations

from django.contrib import admin

from controlpanel.queues.models import ProjectQueue


class ProjectQueueInline(admin.StackedInline):
    """On the project's admin page: how it shares GPUs in Kueue's cohort (site admins)."""

    model = ProjectQueue
    can_delete = False
    max_num = 1
    verbose_name = "GPU sharing (Kueue)"
    verbose_name_plural = "GPU sharing (Kueue: QUEUE_ENGINE=kueue)"
