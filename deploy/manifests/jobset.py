"""A job of several nodes as a JobSet (jobset.x-k8s.io/v1alpha2, JobSet v0.9.1).

One replicated Job, `node`, of `nodes` Indexed pods, each the pod a one-node job would run
(deploy/manifests/jobs.py) with torchrun's rendezvous filled in as the training image's launch
contract says (training/README.md, "The launch contract"): `PET_*` options, node i's rank from
its completion index, the endpoint on pod 0's stable hostname under the JobSet's headless
Service (`network.enableDNSHostnames`). The pods live on several machines, so none shares a
claim: the workspace is the pod's own emptyDir and `rw` volumes are pushed by node 0's sidecar
only (`storage.sync push --only-index 0`), the last time as the pod ends. A pod that fails
restarts the whole group (`failurePolicy.maxRestarts`, bounded), and the preset resumes from
its latest pushed checkpoint. Kueue admits the JobSet as one workload (its queue label, and
`suspend` until admitted).
"""

from __future__ import annotations

from dataclasses import replace

from deploy.manifests.common import Manifest
from deploy.manifests.jobs import (
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    TERMINATION_GRACE_S,
    make_job,
)
from deploy.types import JobRequest

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"
RDZV_PORT = 29400
# Group restarts on a pod's failure before the run fails (each resumes from a checkpoint).
MAX_GROUP_RESTARTS = 2
# torchrun's agent kills the ranks this long after SIGTERM: the rest of the grace is the push's.
SHUTDOWN_TIMEOUT_S = TERMINATION_GRACE_S - 120
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def jobset_pod_hostname(name: str, index: int) -> str:
    """Node `index`'s hostname, as JobSet sets it: `<jobset>-<replicatedJob>-<job>-<index>`."""
    return f"{name}-{REPLICATED_JOB}-0-{index}"


def rendezvous_env(job: JobRequest, name: str) -> list[Manifest]:
    """torchrun's options for node i of `job.nodes` (torchrun reads `--x-y` from PET_X_Y)."""
    per_node = max(job.units * job.flavor.gpus_per_unit, 1)
    endpoint = f"{jobset_pod_hostname(name, 0)}.{name}:{RDZV_PORT}"
    plain = {
        "PET_NNODES": str(job.nodes),
        "PET_NPROC_PER_NODE": str(per_node),
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_ID": f"{job.id}-{job.run}",
        "PET_MAX_RESTARTS": "0",  # JobSet restarts the group, every pod at once
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT_S),
    }
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    return [
        *({"name": key, "value": value} for key, value in plain.items()),
        {"name": "PET_NODE_RANK", "valueFrom": index},
    ]


def make_jobset(*, job: JobRequest) -> Manifest:
    """The JobSet of a job of `job.nodes` > 1 nodes (see the module docstring)."""
    one = make_job(job=replace(job, queue_name=None, priority_class=None))
    meta = one["metadata"]
    name = meta["name"]
    child = one["spec"]
    pod = child["template"]["spec"]
    _own_workspace(job, pod)
    main = pod["containers"][0]
    main["env"] = [*(main.get("env") or []), *rendezvous_env(job, name)]
    child |= {"completionMode": "Indexed", "completions": job.nodes, "parallelism": job.nodes}
    spec: Manifest = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "failurePolicy": {"maxRestarts": MAX_GROUP_RESTARTS},
        "successPolicy": {"operator": "All"},
        "replicatedJobs": [
            {
                "name": REPLICATED_JOB,
                "replicas": 1,
                "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": child},
            }
        ],
    }
    if job.queue_name:
        meta["labels"][KUEUE_QUEUE_LABEL] = job.queue_name
        if job.priority_class:
            meta["labels"][KUEUE_PRIORITY_LABEL] = job.priority_class
        spec["suspend"] = True  # Kueue admits the whole group at once
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": meta, "spec": spec}


def _own_workspace(job: JobRequest, pod: Manifest) -> None:
    """Each pod's workspace its own (no claim spans machines); node 0 alone pushes."""
    pod["volumes"][0] = {"name": "workspace", "emptyDir": {"sizeLimit": f"{job.workspace_gib}Gi"}}
    for container in pod.get("initContainers") or []:
        if container["name"] == "push":
            container["command"] = [*container["command"], "--only-index", "0"]
