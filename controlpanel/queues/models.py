from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from controlpanel.projects.models import Project


class ProjectQueue(models.Model):
    """How a project shares GPUs with the others in Kueue's cohort (QUEUE_ENGINE=kueue): what
    it may borrow beyond its GPU quota, what it lends of it, and its fair-sharing weight. A
    project without a row borrows and lends without limit at weight 1 (Kueue's defaults)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="queue")
    borrowing_limit = models.PositiveIntegerField(
        "GPU borrowing limit",
        null=True,
        blank=True,
        help_text="Most GPUs beyond its quota the project may borrow from idle projects "
        "(empty: no limit; 0: none).",
    )
    lending_limit = models.PositiveIntegerField(
        "GPU lending limit",
        null=True,
        blank=True,
        help_text="Most of its GPU quota others may borrow while it is idle (empty: all).",
    )
    fair_sharing_weight = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="Its share of idle GPUs against the other borrowers (Kueue's fair sharing).",
    )

    def __str__(self) -> str:
        return f"queue of {self.project}"
