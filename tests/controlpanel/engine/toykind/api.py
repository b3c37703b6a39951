"""`/api/v1/batches/`: the batches of the caller's project (read only)."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import serializers, viewsets

from controlpanel.api.scoping import api_project
from tests.controlpanel.engine.toykind.models import Batch


class BatchSerializer(serializers.ModelSerializer[Batch]):
    class Meta:
        model = Batch
        fields = ["id", "name", "kind", "state"]


class BatchViewSet(viewsets.ReadOnlyModelViewSet[Batch]):
    serializer_class = BatchSerializer

    def get_queryset(self) -> QuerySet[Batch]:
        project = api_project(self.request).project
        return Batch.objects.filter(project=project).order_by("name")
