"""`/api/v1/capacity/`: the capacity page's figures for scripts and the CLI (site admins only:
anyone else logged in gets 403, an anonymous caller 401). Like the page it reads the kept
reading (`capacity.capacity_figures()`) and the workload rows, never the cluster."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlpanel.buckets.serializers import DetailSerializer
from controlpanel.dashboards.capacity import capacity_figures
from controlpanel.engine.backend import get_backend

Row = serializers.Serializer[dict[str, Any]]


class TotalsSerializer(Row):
    total = serializers.IntegerField()
    in_use = serializers.IntegerField(help_text="Requested by bound, unfinished pods (anyone's).")
    unavailable = serializers.IntegerField(
        help_text="Idle on nodes that take no new work (cordoned or not ready)."
    )
    free = serializers.IntegerField(help_text="What a new workload could get now.")


class PoolSerializer(TotalsSerializer):
    model = serializers.CharField(help_text="The GPU product (node label), or `unknown`.")
    resource = serializers.CharField(help_text="`nvidia.com/gpu` or `nvidia.com/mig-<profile>`.")
    mig_profile = serializers.CharField(help_text="The MIG profile (`1g.10gb`); empty: whole GPUs.")
    nodes = serializers.IntegerField(help_text="Nodes (or machines) with this pool's GPUs.")
    flavors = serializers.ListField(
        child=serializers.CharField(), help_text="Enabled flavors whose units run on this pool."
    )


class NodeIssueSerializer(Row):
    name = serializers.CharField()
    model = serializers.CharField(help_text="The GPU product; empty for a node without GPUs.")
    gpus = serializers.IntegerField(help_text="Whole GPUs.")
    mig_slices = serializers.IntegerField(help_text="MIG slices of every profile.")
    cordoned = serializers.BooleanField()
    ready = serializers.BooleanField()
    reason = serializers.CharField(help_text="Why it is not ready (its Ready condition).")


class ClusterSerializer(Row):
    backend = serializers.CharField(help_text="The backend that was read: kubernetes or local.")
    nodes = serializers.IntegerField(help_text="Every node (the local backend: 1).")
    millicpu = serializers.IntegerField(help_text="Allocatable CPU, millicores.")
    millicpu_in_use = serializers.IntegerField(help_text="CPU requested, millicores.")
    memory_mib = serializers.IntegerField(help_text="Allocatable memory, MiB.")
    gpus = TotalsSerializer(help_text="Whole GPUs, every model.")
    mig_slices = TotalsSerializer(help_text="MIG slices, every model and profile.")
    pools = PoolSerializer(many=True, help_text="By GPU model and resource (MIG profile).")
    unavailable_nodes = NodeIssueSerializer(
        many=True, help_text="Nodes that take no new work: cordoned or not ready."
    )


class FlavorRowSerializer(Row):
    name = serializers.CharField()
    gpu_model = serializers.CharField(help_text="Empty for a CPU flavor.")
    resource = serializers.CharField()
    mig_profile = serializers.CharField()
    gpus_per_unit = serializers.IntegerField(help_text="GPUs (or MIG slices) per unit.")
    running_units = serializers.IntegerField(help_text="Units held by admitted, live work.")
    running_gpus = serializers.IntegerField()
    waiting = serializers.IntegerField(help_text="Workloads waiting for admission.")
    oldest_wait_s = serializers.FloatField(
        allow_null=True, help_text="How long the oldest waiter has waited; null: none waits."
    )
    free_units = serializers.IntegerField(
        allow_null=True,
        help_text="Units the free GPUs of its pools would take now; null without a reading "
        "or for a CPU flavor.",
    )


class ShareSerializer(Row):
    project = serializers.CharField(help_text="The project's slug.")
    cluster_queue = serializers.CharField(help_text="Its Kueue ClusterQueue.")
    flavor = serializers.CharField()
    resource = serializers.CharField(help_text="`nvidia.com/gpu` or a MIG profile's resource.")
    nominal = serializers.IntegerField(help_text="Its quota of this flavor (GPUs).")
    used = serializers.IntegerField(help_text="GPUs its admitted work holds, borrowed included.")
    borrowed = serializers.IntegerField(help_text="GPUs held beyond its quota.")
    lent = serializers.IntegerField(
        help_text="GPUs of its idle quota others hold (Kueue says what each queue borrows, "
        "not from whom: shared among the idle quotas in proportion)."
    )
    borrowing_limit = serializers.IntegerField(allow_null=True, help_text="null: no limit.")
    lending_limit = serializers.IntegerField(allow_null=True, help_text="null: all of it.")


class CapacitySerializer(Row):
    backend = serializers.CharField(help_text="The configured backend: kubernetes or local.")
    read_at = serializers.DateTimeField(
        allow_null=True, help_text="When the kept reading was taken; null: not read yet."
    )
    error = serializers.CharField(
        help_text="Why the last reading failed (the figures are then the last good one)."
    )
    cluster = ClusterSerializer(
        allow_null=True, help_text="The kept reading; null until the periodic task reads it."
    )
    flavors = FlavorRowSerializer(many=True, help_text="Every enabled flavor, with its queue.")
    sharing = ShareSerializer(
        many=True,
        help_text="With QUEUE_ENGINE=kueue, each project's GPUs in the cohort, as last read "
        "from its ClusterQueue (empty with the builtin engine).",
    )


class SiteAdminsOnly(permissions.IsAdminUser):
    message = "Only site admins can read the cluster's capacity."


def capacity_body() -> dict[str, Any]:
    """The page's figures in the API's shape."""
    figures = capacity_figures()
    reading = figures["capacity"]
    cluster = None
    if reading is not None:
        cluster = {
            "backend": reading.backend,
            "nodes": reading.nodes,
            "millicpu": reading.millicpu,
            "millicpu_in_use": figures["cpu_in_use"],
            "memory_mib": reading.memory_mib,
            "gpus": figures["totals"],
            "mig_slices": figures["mig_totals"],
            "pools": figures["pools"],
            "unavailable_nodes": [asdict(issue) for issue in reading.issues],
        }
    return {
        "backend": get_backend().name,
        "read_at": figures["read_at"],
        "error": figures["error"],
        "cluster": cluster,
        "flavors": figures["flavors"],
        "sharing": figures["sharing"]["rows"] if figures["sharing"] else [],
    }


class CapacityView(APIView):
    """GPUs by model and MIG profile (total, in use, unavailable, free), the flavors with
    their queue and oldest wait, and the nodes taking no new work: the capacity page's
    figures, from the reading the dashboards' periodic task keeps (see `read_at`)."""

    permission_classes = [SiteAdminsOnly]
    pagination_class = None

    @extend_schema(
        responses={
            200: CapacitySerializer,
            401: OpenApiResponse(DetailSerializer, description="Not logged in, or a bad token."),
            403: OpenApiResponse(DetailSerializer, description="Not a site admin."),
        }
    )
    def get(self, request: Request) -> Response:
        return Response(CapacitySerializer(capacity_body()).data)
