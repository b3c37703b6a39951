"""The install's own identity, kept in its database."""

from __future__ import annotations

import secrets

from django.db import models
from django.utils import timezone


def new_install_id() -> str:
    """16 hexadecimal digits: a valid label value, unlikely to meet another install's."""
    return secrets.token_hex(8)


class Installation(models.Model):
    """This install: one row (pk 1), made by the migration that creates the table. Every
    Kubernetes object the panel creates carries `install_id` as `ajuste.io/install`, so two
    installs on one cluster (staging and production, a restore test) never take each other's
    objects for their own. A restored backup keeps it (the restored install owns what it made);
    a copy run as another install renews it (`manage.py install_identity --renew`)."""

    ONLY = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=ONLY, editable=False)
    install_id = models.CharField(max_length=63, unique=True, default=new_install_id)
    created_at = models.DateTimeField(default=timezone.now)
    # The id this install had before a renewal (a copy of another install's database).
    renewed_from = models.CharField(max_length=63, blank=True, default="")

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="one_installation")]

    def __str__(self) -> str:
        return self.install_id
