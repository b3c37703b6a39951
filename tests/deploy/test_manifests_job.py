"""A job run as Kubernetes objects: literal dicts, and strict schema validation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from deploy.manifests import make_job, make_push_job, make_workspace_claim
from deploy.types import JobRequest
from tests.deploy.conftest import (
    A100_MIG,
    CPU,
    DATASET,
    INSTALL,
    OUTPUT,
    make_job_request,
    validate,
)

LABELS = {
    "app.kubernetes.io/managed-by": "ajuste",
    "ajuste.io/project": "vision",
    "ajuste.io/kind": "job",
    "ajuste.io/id": "42",
    "ajuste.io/run": "1",
    "ajuste.io/install": INSTALL,
}
ANNOTATIONS = {"ajuste.io/project": "vision", "ajuste.io/id": "42"}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "fsGroup": 1000,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}
SYNC_RESOURCES = {
    "requests": {"cpu": "250m", "memory": "512Mi"},
    "limits": {"cpu": "2", "memory": "2Gi"},
}
SYNC = ["python", "-m", "storage.sync"]
WORKSPACE_MOUNT = {"name": "workspace", "mountPath": "/workspace"}
# A job's workspace volume: /workspace for every container, the sync state (manifests, pull
# progress) for the sync containers only, outside /workspace.
JOB_WORKSPACE_MOUNT = {**WORKSPACE_MOUNT, "subPath": "workspace"}
STATE_MOUNT = {"name": "workspace", "mountPath": "/ajuste-sync", "subPath": "sync"}
STATE = ["--state-dir", "/ajuste-sync", "--allow-conflicts"]
# The project Secret, as files, for the sync containers only.
DATASTORES_MOUNT = {
    "name": "datastores",
    "mountPath": "/var/run/ajuste/datastores",
    "readOnly": True,
}
DATASTORES_VOLUME = {
    "name": "datastores",
    "secret": {"secretName": "ajuste-datastores", "defaultMode": 0o400},
}


def sync_container(
    name: str, command: list[str], mounts: tuple[dict[str, object], ...] = ()
) -> dict[str, object]:
    return {
        "name": name,
        "image": "ghcr.io/ajuste/ajuste:0.1.0",
        "command": command,
        "env": [{"name": "AJUSTE_DATASTORE_DIR", "value": "/var/run/ajuste/datastores"}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": SYNC_RESOURCES,
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [*(mounts or (JOB_WORKSPACE_MOUNT, STATE_MOUNT)), DATASTORES_MOUNT],
    }


def test_job_with_two_volumes_and_two_h100(job_request: JobRequest) -> None:
    pull = sync_container(
        "pull",
        [
            *SYNC,
            "pull",
            "corpus@GRA/dataset:/workspace/data:ro",
            "corpus@GRA/output:/workspace/output:rw",
            "--root",
            "/",
            *STATE,
            "--progress-file",
            "/ajuste-sync/pull.json",
        ],
    )
    push = sync_container(
        "push",
        [
            *SYNC,
            "push",
            "corpus@GRA/output:/workspace/output:rw",
            "--root",
            "/",
            *STATE,
            "--every",
            "300",
        ],
    )
    push["restartPolicy"] = "Always"
    gpus = {"cpu": "52", "memory": "400Gi", "nvidia.com/gpu": "2"}
    main = {
        "name": "main",
        "image": "registry.example/train:1.0",
        "workingDir": "/workspace",
        "args": ["python", "train.py", "--data", "/workspace/data"],
        "env": [{"name": "EPOCHS", "value": "3"}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": gpus, "limits": gpus},
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [JOB_WORKSPACE_MOUNT, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    labels = {**LABELS, "ajuste.io/component": "main"}
    assert make_job(job=job_request) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "job-42-r1",
            "namespace": "ajuste-vision",
            "labels": labels,
            "annotations": ANNOTATIONS,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 3600,
            "template": {
                "metadata": {"labels": labels, "annotations": ANNOTATIONS},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 300,
                    "securityContext": POD_SECURITY,
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "initContainers": [pull, push],
                    "containers": [main],
                    "volumes": [
                        {
                            "name": "workspace",
                            "persistentVolumeClaim": {"claimName": "job-42-r1-ws"},
                        },
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "100Gi"}},
                        DATASTORES_VOLUME,
                    ],
                },
            },
        },
    }


def test_workspace_claim_kept_for_the_push(job_request: JobRequest) -> None:
    assert make_workspace_claim(job=job_request) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "job-42-r1-ws",
            "namespace": "ajuste-vision",
            "labels": {**LABELS, "ajuste.io/component": "workspace"},
            "annotations": ANNOTATIONS,
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}},
    }


def test_push_job_mounts_the_claim_and_pushes_only_rw(job_request: JobRequest) -> None:
    labels = {**LABELS, "ajuste.io/component": "push"}
    guarded = ["python", "-m", "deploy.finalize", "/ajuste-sync/pull.json", "--"]
    push = sync_container(
        "push",
        [
            *guarded,
            "push",
            "corpus@GRA/output:/workspace/output:rw",
            "--root",
            "/",
            *STATE,
            "--summary-file",
            "/dev/termination-log",
        ],
    )
    assert make_push_job(job=job_request, attempt=2) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "job-42-r1-push-2",
            "namespace": "ajuste-vision",
            "labels": labels,
            "annotations": ANNOTATIONS,
        },
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": 86400,
            "template": {
                "metadata": {"labels": labels, "annotations": ANNOTATIONS},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": POD_SECURITY,
                    "containers": [push],
                    "volumes": [
                        {
                            "name": "workspace",
                            "persistentVolumeClaim": {"claimName": "job-42-r1-ws"},
                        },
                        DATASTORES_VOLUME,
                    ],
                },
            },
        },
    }


def test_every_job_object_is_valid(job_request: JobRequest) -> None:
    claim = make_workspace_claim(job=job_request)
    assert claim is not None
    for manifest in (make_job(job=job_request), claim, make_push_job(job=job_request, attempt=1)):
        validate(manifest)


def test_cpu_job_without_rw_volume_has_no_claim_no_gpu_no_sidecar() -> None:
    job = make_job_request(flavor=CPU, units=1, volumes=(DATASET,), command=())
    manifest = make_job(job=job)
    validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    main = pod["containers"][0]
    assert make_workspace_claim(job=job) is None
    assert [c["name"] for c in pod["initContainers"]] == ["pull"]
    assert pod["volumes"][0] == {"name": "workspace", "emptyDir": {"sizeLimit": "50Gi"}}
    assert main["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert "args" not in main  # no command: the image's own entrypoint and command run
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_a_mig_flavor_asks_for_its_profile_not_whole_gpus() -> None:
    job = make_job_request(flavor=A100_MIG, units=2)
    manifest = make_job(job=job)
    validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    slices = {"cpu": "16", "memory": "120Gi", "nvidia.com/mig-3g.40gb": "2"}
    assert pod["containers"][0]["resources"] == {"requests": slices, "limits": slices}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_queue_label_suspends_for_kueue_and_pull_secrets_are_used() -> None:
    job = make_job_request(queue_name="team-gpu", image_pull_secrets=["regcred"])
    manifest = make_job(job=job)
    validate(manifest)
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"
    assert manifest["spec"]["suspend"] is True
    assert manifest["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


@pytest.mark.parametrize(
    "volumes", [(DATASET, OUTPUT), (DATASET,), ()], ids=["rw", "ro-only", "no-volumes"]
)
def test_credentials_reach_the_sync_containers_only_as_files(volumes: tuple[Any, ...]) -> None:
    """No container gets credentials through its environment (envFrom, secretKeyRef); the
    Secret's volume is mounted, read-only, by the sync containers and by no other."""
    job = make_job_request(volumes=volumes, env={"HF_HOME": "/workspace/hf"})
    pods = [make_job(job=job)["spec"]["template"]["spec"]]
    if job.pushed_volumes:
        pods.append(make_push_job(job=job, attempt=1)["spec"]["template"]["spec"])
    for pod in pods:
        text = repr(pod)
        assert "envFrom" not in text and "secretKeyRef" not in text and "secretRef" not in text
        secret_volumes = [v["name"] for v in pod["volumes"] if "secret" in v]
        assert secret_volumes == (["datastores"] if volumes else [])
        for container in _containers(pod):
            mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
            is_sync = container["name"] in ("pull", "push")
            assert ("datastores" in mounts) == is_sync, container["name"]
            if is_sync:
                assert mounts["datastores"]["readOnly"] is True
        main = pod["containers"][0]
        if main["name"] == "main":
            assert [e["name"] for e in main.get("env", [])] == ["HF_HOME"]


def test_secret_references_become_secret_key_refs_without_a_value() -> None:
    """env HF_TOKEN=secret:hf_prod reaches the user's container from the project's Secret;
    the Job holds the secret's name only, and the sync containers get none of it."""
    job = make_job_request(
        volumes=(DATASET, OUTPUT),
        env={"EPOCHS": "3"},
        secret_env={"HF_TOKEN": "hf_prod", "A_KEY": "A_KEY"},
    )
    manifest = make_job(job=job)
    validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    ref = "secretKeyRef"
    assert pod["containers"][0]["env"] == [
        {"name": "EPOCHS", "value": "3"},
        {"name": "A_KEY", "valueFrom": {ref: {"name": "ajuste-project-secrets", "key": "A_KEY"}}},
        {
            "name": "HF_TOKEN",
            "valueFrom": {ref: {"name": "ajuste-project-secrets", "key": "hf_prod"}},
        },
    ]
    for container in pod["initContainers"]:
        assert ref not in repr(container) and "hf_prod" not in repr(container)
    assert ref not in repr(make_push_job(job=job, attempt=1))


def test_user_labels_travel_as_an_annotation_and_names_stay_valid() -> None:
    job = make_job_request(id="Run_42/Ü", run=3, labels={"team": "nlp", "odd key!": "x y"})
    manifest = make_job(job=job)
    validate(manifest)
    meta = manifest["metadata"]
    assert meta["name"].startswith("job-run-42-")
    assert meta["annotations"]["ajuste.io/id"] == "Run_42/Ü"
    assert meta["annotations"]["ajuste.io/user-labels"] == '{"odd key!": "x y", "team": "nlp"}'
    assert meta["labels"]["ajuste.io/run"] == "3"


def test_sync_image_is_overridable(job_request: JobRequest) -> None:
    job = replace(job_request, sync_image="registry.local/ajuste:dev")
    images = {c["image"] for c in make_job(job=job)["spec"]["template"]["spec"]["initContainers"]}
    assert images == {"registry.local/ajuste:dev"}


def test_the_sync_state_is_outside_every_volume_and_out_of_the_users_reach(
    job_request: JobRequest,
) -> None:
    pods = [make_job(job=job_request), make_push_job(job=job_request, attempt=1)]
    for pod in (manifest["spec"]["template"]["spec"] for manifest in pods):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            mounts = {m["mountPath"]: m.get("subPath") for m in container["volumeMounts"]}
            assert mounts["/workspace"] == "workspace"
            command = container.get("command") or []
            if container["name"] == "main":
                assert "sync" not in mounts.values()
                continue
            assert mounts["/ajuste-sync"] == "sync"
            for flag in ("--state-dir", "--progress-file"):
                if flag in command:
                    path = command[command.index(flag) + 1]
                    assert path.startswith("/ajuste-sync"), path
