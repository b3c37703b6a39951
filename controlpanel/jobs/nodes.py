"""A job's `nodes`: how many pods of `gpu` units it runs at once, under torchrun.

One node is today's Job. More than one is a JobSet (deploy/manifests/jobset.py), admitted as a
whole: every check here counts `nodes × gpu`, and a job that could never start is refused at
submit, with the reason, rather than left waiting.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.engine.validation import whole_number
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project

NODES_NOTE = (
    "More than one node needs the Kubernetes backend or the local one (COMPUTE_BACKEND="
    "kubernetes or local): this panel's backend runs a job on one node."
)
# The backends that run a job of several nodes: Kubernetes applies, observes, stops and bills
# its JobSet (deploy/kubernetes/jobsets.py); the local backend runs one torchrun agent per node
# on this machine (deploy/local/group.py). Elsewhere more than one node is refused at submit.
MULTI_NODE_BACKENDS: frozenset[str] = frozenset({"kubernetes", "local"})


def check_nodes(value: Any, units: int | None, flavor: Flavor | None, project: Project) -> int:
    """`value` (None or empty: 1) checked against the site's limit, the backend and the
    project's GPU quota for all the nodes together (`units` per node; None when the GPU count
    was itself refused)."""
    nodes = 1 if value in (None, "") else whole_number(value, "The node count")
    if nodes < 1:
        raise ValidationError("Ask for at least 1 node.")
    if nodes > settings.MAX_NODES_PER_JOB:
        raise ValidationError(
            f"At most {settings.MAX_NODES_PER_JOB} nodes per job (asked for {nodes})."
        )
    if nodes > 1 and settings.COMPUTE_BACKEND not in MULTI_NODE_BACKENDS:
        raise ValidationError(NODES_NOTE)
    if units is None or flavor is None:
        return nodes
    gpus = nodes * units * flavor.gpus_per_unit
    if nodes > 1 and gpus > project.gpu_quota:
        raise ValidationError(
            f"{nodes} nodes of {units * flavor.gpus_per_unit} GPUs need {gpus} GPUs at once but "
            f"the project's quota is {project.gpu_quota}: the job could never start."
        )
    problem = cluster_problem(nodes, units, flavor) if nodes > 1 else None
    if problem:
        raise ValidationError(problem)
    return nodes


def cluster_problem(nodes: int, units: int, flavor: Flavor) -> str | None:
    """Why `nodes` × `units` of `flavor` could never run at once on the backend's machines, as
    the panel's last capacity reading knows them (`dashboards.capacity`: every node's GPUs of
    the flavor's model, cordoned or down ones included, busy or not), or None: a CPU flavor,
    no reading, or a reading of another backend (the scheduler then decides)."""
    # Deferred: the dashboards import the engine, whose validators import this module.
    from controlpanel.dashboards.capacity import capacity_reading, runs_on

    reading, read_at, _ = capacity_reading()
    if not flavor.is_gpu or reading is None or reading.backend != settings.COMPUTE_BACKEND:
        return None
    total = sum(pool.total for pool in reading.pools if runs_on(flavor, pool))
    per_node = units * flavor.gpus_per_unit
    if nodes * per_node <= total:
        return None
    where = "this machine has" if reading.backend == "local" else "the cluster's nodes have"
    when = f" (read at {read_at:%Y-%m-%d %H:%M} UTC)" if read_at else ""
    model = flavor.gpu_model or flavor.name
    return (
        f"{nodes} nodes of {per_node} GPUs need {nodes * per_node} {model} GPUs at once but "
        f"{where} {total} in all{when}: the job could never start."
    )
