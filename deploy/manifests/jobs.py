"""A job run as Kubernetes objects.

How rw volumes survive the pod (the design, also in docs/deploy-kubernetes.md):

- A job with rw/rwd volumes gets a per-run PersistentVolumeClaim (`job-<id>-r<run>-ws`) mounted
  at /workspace in every container; jobs with only ro volumes use an emptyDir instead.
- The init container `pull` runs `python -m storage.sync pull ...` before the user's
  container starts (INITIALIZING).
- The native sidecar `push` (an init container with `restartPolicy: Always`) runs
  `storage.sync push ... --every S`, so checkpoints reach the bucket during the run; it ends
  (with a last push) when the user's container has exited, and never holds the Job open.
- The workspace volume holds two folders: `workspace`, mounted at /workspace in every
  container, and `sync`, mounted at /ajuste-sync in the sync containers only. The pull
  records there each volume's manifest (the base of the three-way push) and its progress:
  outside every volume, out of the user's container's reach, and kept for the finalize Job.
- Once the Job is finished, the backend creates a finalize Job (`...-push-<attempt>`) that
  mounts the same claim and pushes once more, through `deploy.finalize`, which skips the push
  when the pull never completed (an `rwd` push of a partial workspace would delete data).
  Its summary (the keys pushed with a conflict) is its termination message.
  Its success ends the run; its failure is SYNC_FAILED and leaves the claim in place, so
  `retry_push` starts attempt n+1 on the same data. Once the run has ended cleanly (pushed,
  or with nothing to push) the panel releases the claim (`release_workspace`); after
  SYNC_FAILED or ERROR it stays until the push succeeds or the job is deleted (`delete_job`).
"""

from __future__ import annotations

from deploy import names
from deploy.kinds import DeploySpec
from deploy.manifests.common import (
    PULL_PROGRESS,
    WORKSPACE,
    Manifest,
    datastore_volume,
    main_mounts,
    metadata,
    pod_base,
    pod_security_context,
    pull_and_push,
    shm_volume,
    sync_container,
    user_env,
    user_limits,
    workload_annotations,
)
from deploy.types import JobRequest, WorkloadKind

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Long enough for the sidecar's last push when the pod ends.
TERMINATION_GRACE_S = 300
PUSH_BACKOFF_LIMIT = 2
PUSH_DEADLINE_S = 24 * 3600


def make_workspace_claim(*, job: JobRequest) -> Manifest | None:
    """The per-run workspace claim, or None when nothing has to be pushed back."""
    if not job.pushed_volumes:
        return None
    spec: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{job.workspace_gib}Gi"}},
    }
    if job.storage_class:
        spec["storageClassName"] = job.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(job, names.workspace_claim_name(job.ref), "workspace"),
        "spec": spec,
    }


def make_job(*, job: JobRequest) -> Manifest:
    """The batch/v1 Job running the user's container (see the module docstring)."""
    meta = _meta(job, names.job_name(job.ref), "main")
    spec: Manifest = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": job.timeout_s,
        "template": {
            "metadata": {"labels": dict(meta["labels"]), "annotations": dict(meta["annotations"])},
            "spec": _pod_spec(job),
        },
    }
    if job.queue_name:
        meta["labels"][KUEUE_QUEUE_LABEL] = job.queue_name
        if job.priority_class:
            meta["labels"][KUEUE_PRIORITY_LABEL] = job.priority_class
        # Kueue admits a suspended Job by unsuspending it once the quota allows.
        spec["suspend"] = True
    if job.preemptible:
        # A pod ended by a disruption (Kueue's preemption, a node drain, the eviction API) is
        # not the job's failure: the Job makes a new pod when it may run again, and the
        # training resumes from the checkpoint its SIGTERM saved and the sidecar pushed.
        spec["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def make_push_job(*, job: JobRequest, attempt: int) -> Manifest:
    """The finalize Job: one push of the rw volumes from the kept workspace claim."""
    meta = _meta(job, names.push_job_name(job.ref, attempt), "push")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": PUSH_BACKOFF_LIMIT,
            "activeDeadlineSeconds": PUSH_DEADLINE_S,
            "template": {
                "metadata": {
                    "labels": dict(meta["labels"]),
                    "annotations": dict(meta["annotations"]),
                },
                "spec": _push_pod_spec(job),
            },
        },
    }


def _push_pod_spec(job: JobRequest) -> Manifest:
    push = sync_container(job, name="push", action="push", volumes=job.pushed_volumes, guarded=True)
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [push],
        "volumes": [_workspace_volume(job), datastore_volume(job.datastore_secret)],
    }


def _meta(job: JobRequest, name: str, component: str) -> Manifest:
    return metadata(
        name=name,
        namespace=job.namespace,
        labels=names.workload_labels(job.ref, component=component),
        annotations=workload_annotations(job.ref, job.labels),
    )


def _pod_spec(job: JobRequest) -> Manifest:
    pod: Manifest = {
        "restartPolicy": "Never",
        **pod_base(job.flavor, job.image_pull_secrets, TERMINATION_GRACE_S),
    }
    init = pull_and_push(job, progress_file=PULL_PROGRESS)
    if init:
        pod["initContainers"] = init
    pod["containers"] = [_main_container(job)]
    pod["volumes"] = [_workspace_volume(job), shm_volume(job.flavor, job.units)]
    if init:  # the sync containers' credentials; the user's container never mounts them
        pod["volumes"].append(datastore_volume(job.datastore_secret))
    return pod


def _main_container(job: JobRequest) -> Manifest:
    container: Manifest = {
        "name": "main",
        "image": job.image,
        "workingDir": WORKSPACE,
    }
    if job.command:
        # `args`, like `docker run IMAGE CMD...`: the image's entrypoint wrapper still runs.
        container["args"] = list(job.command)
    if job.env or job.secret_env:
        container["env"] = user_env(job)
    # The last lines of a failing run become the pod's termination message: our reason.
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    container.update(user_limits(job))
    container["volumeMounts"] = main_mounts()
    return container


def _workspace_volume(job: JobRequest) -> Manifest:
    if job.pushed_volumes:
        claim = names.workspace_claim_name(job.ref)
        return {"name": "workspace", "persistentVolumeClaim": {"claimName": claim}}
    return {"name": "workspace", "emptyDir": {"sizeLimit": f"{job.workspace_gib}Gi"}}


# The job kind's entry in the deploy registry (`deploy.kinds`).
SPEC = DeploySpec(
    kind=WorkloadKind.JOB,
    object_name=names.job_name,
    component="main",
    running=("JobSet", "Job", "Pod"),  # a job of several nodes: its JobSet first
    cluster="deploy.kubernetes.job_kind",
    numbered_runs=True,
)
