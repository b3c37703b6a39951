"""A project's quota or sharing settings, or a flavor, changed: Kueue's configuration follows
(after the commit; the task re-reads everything, so a burst of saves converges)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.selectors import kueue_on


@receiver(post_save, sender=Project)
@receiver(post_delete, sender=Project)
@receiver(post_save, sender=ProjectQueue)
@receiver(post_save, sender=Flavor)
def queues_changed(sender: Any, **kwargs: Any) -> None:
    if not kueue_on():
        return
    from controlpanel.queues.tasks import queues_reconcile_task

    queues_reconcile_task.delay_on_commit()
