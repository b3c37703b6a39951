from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class ContentTicket(models.Model):
    """One Open of a notebook or app by one user: first a one-time ticket (only its SHA-256
    is kept) good for `USER_CONTENT_TICKET_SECONDS` on that workload's host alone, then, once
    redeemed, what the host's own cookie names (its id, signed). The panel session that
    opened it is kept so that logging out of the panel closes the content host too."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    digest = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    session_key = models.CharField(max_length=40)
    kind = models.CharField(max_length=20)
    workload_id = models.UUIDField()
    label = models.CharField(max_length=63)  # the host's first label: `nb-<32 hex>`
    next_path = models.CharField(max_length=2000, default="/")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    redeemed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"])]

    def __str__(self) -> str:
        return f"{self.label} for {self.user_id}"
