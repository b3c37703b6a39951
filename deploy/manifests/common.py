"""Pieces shared by every workload manifest: metadata, security, resources, sync containers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from deploy import images, names
from deploy.types import FlavorSpec, Toleration, WorkloadRef
from storage.datastore import DIR_VARIABLE, POD_DIR
from storage.volumes import VolumeSpec, render_volume_spec

Manifest = dict[str, Any]

WORKSPACE = "/workspace"
# Every container runs as this unprivileged user; fsGroup makes the workspace writable to it.
RUN_AS = 1000
SHM_PATH = "/dev/shm"  # noqa: S108 - a mount point for a memory volume, not a temp file
SYNC_MODULE = ("python", "-m", "storage.sync")
# The project Secret's volume: mounted into the sync containers only, read-only, owner-read.
DATASTORES_VOLUME = "datastores"
SECRET_FILE_MODE = 0o400
# Written by the pull; the finalize push reads it to know the pull was complete.
# The sync engine's own files (each volume's manifest, the base of a three-way push; the
# pull's progress) live here, outside /workspace, so outside every volume: a bucket mounted
# at /workspace itself can neither see them nor overwrite them. Only sync containers mount it.
SYNC_STATE = "/ajuste-sync"
PULL_PROGRESS = f"{SYNC_STATE}/pull.json"
# A finalize push writes its summary (conflicts) here; the watcher reads it from pod status.
TERMINATION_LOG = "/dev/termination-log"
# A job's workspace volume holds /workspace under WORKSPACE_SUBPATH and the sync state under
# STATE_SUBPATH: the user's container mounts only the first.
WORKSPACE_SUBPATH = "workspace"
STATE_SUBPATH = "sync"
SYNC_STATE_VOLUME = "sync-state"


def metadata(
    *, name: str, namespace: str | None, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> Manifest:
    """Object metadata; empty annotations are left out so literal dicts stay short."""
    meta: Manifest = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def workload_annotations(ref: WorkloadRef, user_labels: Mapping[str, str]) -> dict[str, str]:
    """The raw project and id (labels may be hashed) and the user's labels, verbatim."""
    annotations = {names.PROJECT: ref.project, names.ID: ref.id}
    if user_labels:
        annotations[names.USER_LABELS] = json.dumps(dict(user_labels), sort_keys=True)
    return annotations


def pod_security_context() -> Manifest:
    """The `restricted` Pod Security Standard at pod level."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_base(flavor: FlavorSpec, image_pull_secrets: Iterable[str], grace_s: int) -> Manifest:
    """What every workload's pod spec starts from: no service account token nor service links,
    the restricted security context, the flavor's node selector and tolerations, the pull
    secrets, and how long the pod may take to stop."""
    pod: Manifest = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_s,
        "securityContext": pod_security_context(),
    }
    if flavor.node_selector:
        pod["nodeSelector"] = dict(flavor.node_selector)
    if flavor.tolerations:
        pod["tolerations"] = tolerations(flavor.tolerations)
    secrets = pull_secrets(image_pull_secrets)
    if secrets:
        pod["imagePullSecrets"] = secrets
    return pod


def container_security_context() -> Manifest:
    """The `restricted` Pod Security Standard at container level."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }


def flavor_resources(flavor: FlavorSpec, units: int) -> Manifest:
    """Requests equal limits (Guaranteed QoS); GPUs only when the flavor has some."""
    amounts: dict[str, str] = {
        "cpu": str(flavor.vcpu_per_unit * units),
        "memory": f"{flavor.memory_gib_per_unit * units}Gi",
    }
    if flavor.gpus_per_unit:
        amounts[flavor.resource_key] = str(flavor.gpus_per_unit * units)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def shm_size_gib(flavor: FlavorSpec, units: int) -> int:
    """The shared-memory volume gets a quarter of the memory (at least 1 GiB): DataLoader
    workers share batches through it, and it counts against the container's memory limit."""
    return max(1, flavor.memory_gib_per_unit * units // 4)


def tolerations(items: Iterable[Toleration]) -> list[Manifest]:
    """Flavor tolerations as the API spells them."""
    result = []
    for item in items:
        entry: Manifest = {"key": item.key, "operator": item.operator}
        if item.value is not None and item.operator != "Exists":
            entry["value"] = item.value
        if item.effect:
            entry["effect"] = item.effect
        result.append(entry)
    return result


def env_list(env: Mapping[str, str]) -> list[Manifest]:
    """Plain env vars, sorted so the manifest is deterministic."""
    return [{"name": key, "value": env[key]} for key in sorted(env)]


def user_limits(request: Running) -> Manifest:
    """The user's container's resources (its flavor's, times its units) and its locked-down
    security context, in that order."""
    return {
        "resources": flavor_resources(request.flavor, request.units),
        "securityContext": container_security_context(),
    }


def user_env(
    request: Running,
    *,
    first: Mapping[str, str] | None = None,
    last: Mapping[str, str] | None = None,
    drop: Iterable[str] = (),
) -> list[Manifest]:
    """The user's container's env: the request's plain values (a name that is also a secret
    reference is the secret's), `first` before them (a user's value wins, in its place) and
    `last` after, then the secret references to the project Secret; names in `drop` never."""
    dropped = set(drop) | set(request.secret_env)
    plain = {k: v for k, v in request.env.items() if k not in dropped}
    secrets = {k: v for k, v in request.secret_env.items() if k not in set(drop)}
    return env_list({**(first or {}), **plain, **(last or {})}) + secret_env_list(
        secrets, request.project_secrets
    )


def secret_env_list(env: Mapping[str, str], secret: str) -> list[Manifest]:
    """Env vars read from keys of the Secret `secret` (no value in the manifest), sorted."""
    return [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": env[key]}}}
        for key in sorted(env)
    ]


class Syncing(Protocol):
    """What a sync container takes of a request (JobRequest, NotebookRequest, AppRequest)."""

    @property
    def sync_image(self) -> str | None: ...


class Running(Protocol):
    """What the user's container takes of a request: its env and secret references."""

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def secret_env(self) -> Mapping[str, str]: ...

    @property
    def project_secrets(self) -> str: ...

    @property
    def flavor(self) -> FlavorSpec: ...

    @property
    def units(self) -> int: ...


class Pushing(Syncing, Protocol):
    """A request whose pod pulls its volumes and pushes the rw ones back while it runs."""

    @property
    def volumes(self) -> tuple[VolumeSpec, ...]: ...

    @property
    def pushed_volumes(self) -> tuple[VolumeSpec, ...]: ...

    @property
    def push_every_s(self) -> int: ...


def pull_and_push(
    request: Pushing, *, subpaths: bool = True, progress_file: str | None = None
) -> list[Manifest]:
    """The init containers of a pod that pulls its volumes before the user's process starts
    (`pull`, with its `progress_file`) and pushes the rw ones back during the run (the native
    sidecar `push`: it ends, with a last push, when the pod's other containers have)."""
    containers: list[Manifest] = []
    if request.volumes:
        containers.append(
            sync_container(
                request,
                name="pull",
                action="pull",
                volumes=request.volumes,
                subpaths=subpaths,
                progress_file=progress_file,
            )
        )
    if request.pushed_volumes:
        sidecar = sync_container(
            request,
            name="push",
            action="push",
            volumes=request.pushed_volumes,
            every_s=request.push_every_s,
            subpaths=subpaths,
        )
        sidecar["restartPolicy"] = "Always"  # a native sidecar: ends with the pod
        containers.append(sidecar)
    return containers


def sync_container(
    request: Syncing,
    *,
    name: str,
    action: str,
    volumes: Iterable[VolumeSpec],
    every_s: int | None = None,
    progress_file: str | None = None,
    guarded: bool = False,
    subpaths: bool = True,
) -> Manifest:
    """A container running the storage sync engine; only it sees the S3 credentials, as files
    of the project Secret mounted at `POD_DIR` (never env: a process's environment is readable
    at /proc/<pid>/environ and copied into every child). The pod needs `datastore_volume()`.
    Its manifests and progress go to SYNC_STATE (`sync_mounts`). `guarded` runs it through
    `deploy.finalize`, which pushes only after a complete pull, and writes the push's summary
    as the termination message."""
    command = [*SYNC_MODULE, action, *(render_volume_spec(v) for v in volumes), "--root", "/"]
    # Conflicts are the run's note (the summary), not a failed push: the panel keeps going.
    command += ["--state-dir", SYNC_STATE, "--allow-conflicts"]
    if every_s is not None:
        command += ["--every", str(every_s)]
    if progress_file is not None:
        command += ["--progress-file", progress_file]
    if guarded:
        command += ["--summary-file", TERMINATION_LOG]
        command = ["python", "-m", "deploy.finalize", PULL_PROGRESS, "--", *command[3:]]
    return {
        "name": name,
        "image": request.sync_image or images.SYNC_IMAGE,
        "command": command,
        "env": [{"name": DIR_VARIABLE, "value": POD_DIR}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {
            "requests": {"cpu": "250m", "memory": "512Mi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
        "securityContext": container_security_context(),
        "volumeMounts": [
            *sync_mounts(subpaths=subpaths),
            {"name": DATASTORES_VOLUME, "mountPath": POD_DIR, "readOnly": True},
        ],
    }


def http_service(meta: Manifest, ref: WorkloadRef, port: int) -> Manifest:
    """A ClusterIP Service in front of the pod's `http` port (an editor's, a server's) at
    `port`: where the user-content gateway sends what the panel lets through."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(ref),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def sync_mounts(*, subpaths: bool) -> list[Manifest]:
    """The workspace and the sync state: two subPaths of the workspace volume (a job: the
    state must outlive the pod, for the finalize push), or the whole workspace and a
    `sync_state_volume()` (a notebook, whose workspace already holds the user's files)."""
    if subpaths:
        return [
            {"name": "workspace", "mountPath": WORKSPACE, "subPath": WORKSPACE_SUBPATH},
            {"name": "workspace", "mountPath": SYNC_STATE, "subPath": STATE_SUBPATH},
        ]
    return [
        {"name": "workspace", "mountPath": WORKSPACE},
        {"name": SYNC_STATE_VOLUME, "mountPath": SYNC_STATE},
    ]


def sync_state_volume() -> Manifest:
    """The sync state of a pod whose workspace has no room for it (notebooks)."""
    return {"name": SYNC_STATE_VOLUME, "emptyDir": {"sizeLimit": "1Gi"}}


def datastore_volume(secret: str) -> Manifest:
    """The project Secret as files (`<ALIAS>.access_key`, ...), for the sync containers' mount.
    A Secret volume follows updates of the Secret (refreshed temporary credentials)."""
    return {
        "name": DATASTORES_VOLUME,
        "secret": {"secretName": secret, "defaultMode": SECRET_FILE_MODE},
    }


def pull_secrets(secrets: Iterable[str]) -> list[Manifest]:
    """imagePullSecrets entries."""
    return [{"name": secret} for secret in secrets]


def shm_volume(flavor: FlavorSpec, units: int) -> Manifest:
    """The memory-backed volume mounted at /dev/shm."""
    size = f"{shm_size_gib(flavor, units)}Gi"
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def main_mounts(*, subpaths: bool = True) -> list[Manifest]:
    """Mounts of the user's container: the workspace (never the sync state) and /dev/shm."""
    workspace: Manifest = {"name": "workspace", "mountPath": WORKSPACE}
    if subpaths:
        workspace["subPath"] = WORKSPACE_SUBPATH
    return [workspace, {"name": "dshm", "mountPath": SHM_PATH}]
