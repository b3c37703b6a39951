"""The append-only audit log: who did what, to which project and object, from where.

Rows are written by `controlpanel.audit.record()` only and never change: saving an existing
row, deleting one and a queryset's update() or delete() raise `AppendOnlyError`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class AppendOnlyError(Exception):
    """An audit event was asked to change or go away."""


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnlyError("The audit log is append-only: events are never updated.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("The audit log is append-only: events are never deleted.")

    # bulk_update goes through update(); bulk_create adds rows, which is allowed.


class AuditEvent(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    # The user who acted (None: nobody signed in, e.g. a failed log-in, or a task); the
    # username is kept as it was, so the row still reads right after a rename or deletion.
    # No database constraint and DO_NOTHING: deleting a user or a project changes no event
    # (SET_NULL would be an update, which the log refuses).
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
    )
    actor_username = models.CharField(max_length=150, blank=True, db_index=True)
    # A short dotted name: "auth.login", "token.create", "workload.stop", ...
    action = models.CharField(max_length=64, db_index=True)
    project = models.ForeignKey(
        "projects.Project",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
    )
    project_slug = models.CharField(max_length=100, blank=True, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    details = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    request_id = models.CharField(max_length=128, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ("-at", "-id")
        indexes = [models.Index(fields=["-at", "-id"], name="audit_newest_first")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} by {self.actor_username or '-'}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise AppendOnlyError("The audit log is append-only: events are never updated.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("The audit log is append-only: events are never deleted.")
