"""A notebook as Kubernetes objects: literal dicts and validation. No Ingress: the user-content
gateway serves it on its own host and reaches it through its Service."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploy import manifests
from deploy.manifests import (
    make_notebook_secret,
    make_notebook_service,
    make_notebook_statefulset,
)
from deploy.types import Editor, NotebookRequest
from tests.deploy.conftest import A100_MIG, INSTALL, validate
from tests.deploy.test_manifests_job import (
    CONTAINER_SECURITY,
    DATASTORES_VOLUME,
    POD_SECURITY,
    STATE,
    SYNC,
    WORKSPACE_MOUNT,
    sync_container,
)

SELECTOR = {
    "app.kubernetes.io/managed-by": "ajuste",
    "ajuste.io/project": "vision",
    "ajuste.io/kind": "notebook",
    "ajuste.io/id": "7",
}
# The selector leaves the install out (a StatefulSet's selector never changes); labels carry it.
LABELS = {**SELECTOR, "ajuste.io/component": "notebook", "ajuste.io/install": INSTALL}
ANNOTATIONS = {"ajuste.io/project": "vision", "ajuste.io/id": "7"}
TOKEN_MOUNT = {"name": "editor-token", "mountPath": "/ajuste-editor", "readOnly": True}
TOKEN_VOLUME = {
    "name": "editor-token",
    "secret": {
        "secretName": "nb-7",
        "items": [{"key": "token", "path": "token"}],
        "defaultMode": 0o400,
    },
}


def test_statefulset_keeps_the_workspace_claim(notebook_request: NotebookRequest) -> None:
    # The workspace claim holds the user's files only; the sync state is the pod's own.
    mounts = (WORKSPACE_MOUNT, {"name": "sync-state", "mountPath": "/ajuste-sync"})
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
        mounts,
    )
    push["restartPolicy"] = "Always"
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
        ],
        mounts,
    )
    one_gpu = {"cpu": "26", "memory": "200Gi", "nvidia.com/gpu": "1"}
    annotations = {**ANNOTATIONS, "ajuste.io/url": "https://nb-7.usercontent.ajuste.example/"}
    assert make_notebook_statefulset(notebook=notebook_request) == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "nb-7",
            "namespace": "ajuste-vision",
            "labels": LABELS,
            "annotations": annotations,
        },
        "spec": {
            "replicas": 1,
            "serviceName": "nb-7",
            "selector": {"matchLabels": SELECTOR},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete",
                "whenScaled": "Retain",
            },
            "template": {
                "metadata": {"labels": LABELS, "annotations": annotations},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 300,
                    "securityContext": POD_SECURITY,
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "initContainers": [pull, push],
                    "containers": [
                        {
                            "name": "main",
                            "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11",
                            "command": [
                                "jupyter",
                                "lab",
                                "--ip=0.0.0.0",
                                "--port=8888",
                                "--no-browser",
                                "--ServerApp.base_url=/",
                                "--ServerApp.root_dir=/workspace",
                                "--ServerApp.trust_xheaders=True",
                            ],
                            "workingDir": "/workspace",
                            "ports": [{"name": "http", "containerPort": 8888, "protocol": "TCP"}],
                            "env": [
                                {"name": "JUPYTER_TOKEN_FILE", "value": "/ajuste-editor/token"}
                            ],
                            "resources": {"requests": one_gpu, "limits": one_gpu},
                            "securityContext": CONTAINER_SECURITY,
                            "readinessProbe": {
                                "tcpSocket": {"port": "http"},
                                "periodSeconds": 5,
                                "failureThreshold": 3,
                            },
                            "volumeMounts": [
                                WORKSPACE_MOUNT,
                                {"name": "dshm", "mountPath": "/dev/shm"},
                                TOKEN_MOUNT,
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "50Gi"}},
                        TOKEN_VOLUME,
                        DATASTORES_VOLUME,
                        {"name": "sync-state", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "workspace", "labels": LABELS},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "20Gi"}},
                    },
                }
            ],
        },
    }


def test_a_service_and_no_ingress(notebook_request: NotebookRequest) -> None:
    assert make_notebook_service(notebook=notebook_request) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "nb-7",
            "namespace": "ajuste-vision",
            "labels": LABELS,
            "annotations": ANNOTATIONS,
        },
        "spec": {
            "type": "ClusterIP",
            "selector": SELECTOR,
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    assert not hasattr(manifests, "make_notebook_ingress")  # the gateway serves it


def test_stopped_notebook_has_no_replica_but_the_same_claim(
    notebook_request: NotebookRequest,
) -> None:
    running = make_notebook_statefulset(notebook=notebook_request)
    stopped = make_notebook_statefulset(notebook=replace(notebook_request, running=False))
    assert stopped["spec"]["replicas"] == 0
    assert stopped["spec"]["volumeClaimTemplates"] == running["spec"]["volumeClaimTemplates"]
    assert make_notebook_service(notebook=replace(notebook_request, running=False)) == (
        make_notebook_service(notebook=notebook_request)
    )


def test_vscode_serves_at_the_root_of_its_own_host(notebook_request: NotebookRequest) -> None:
    vscode = replace(notebook_request, editor=Editor.VSCODE, volumes=())
    pod = make_notebook_statefulset(notebook=vscode)["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"][:3] == [
        "code-server",
        "--bind-addr=0.0.0.0:8888",
        "--auth=none",
    ]
    assert "initContainers" not in pod


def test_every_notebook_object_is_valid(notebook_request: NotebookRequest) -> None:
    for request in (notebook_request, replace(notebook_request, editor=Editor.VSCODE)):
        validate(make_notebook_statefulset(notebook=request))
        validate(make_notebook_service(notebook=request))
        validate(make_notebook_secret(notebook=request))


def test_the_editor_token_is_a_secret_file_the_user_cannot_replace(
    notebook_request: NotebookRequest,
) -> None:
    """JupyterLab requires the token in the notebook's own Secret, read from a file; the
    user's env cannot replace it (JUPYTER_TOKEN would win over the file), plain or secret."""
    assert make_notebook_secret(notebook=notebook_request) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "nb-7",
            "namespace": "ajuste-vision",
            "labels": LABELS,
            "annotations": ANNOTATIONS,
        },
        "type": "Opaque",
        "stringData": {"token": "editor-token-7"},
    }
    sneaky = replace(
        notebook_request,
        env={"JUPYTER_TOKEN": "", "JUPYTER_TOKEN_FILE": "/dev/null", "SEED": "1"},
        secret_env={"JUPYTER_TOKEN": "mine"},
    )
    main = make_notebook_statefulset(notebook=sneaky)["spec"]["template"]["spec"]["containers"][0]
    assert main["env"] == [
        {"name": "JUPYTER_TOKEN_FILE", "value": "/ajuste-editor/token"},
        {"name": "SEED", "value": "1"},
    ]
    assert not any("token" in arg.lower() for arg in main["command"])
    with pytest.raises(ValueError, match="editor token"):
        make_notebook_secret(notebook=replace(notebook_request, token=""))


def test_a_mig_notebook_asks_for_one_slice(notebook_request: NotebookRequest) -> None:
    notebook = replace(notebook_request, flavor=A100_MIG, units=1)
    manifest = make_notebook_statefulset(notebook=notebook)
    validate(manifest)
    [editor] = manifest["spec"]["template"]["spec"]["containers"]
    one = {"cpu": "8", "memory": "60Gi", "nvidia.com/mig-3g.40gb": "1"}
    assert editor["resources"] == {"requests": one, "limits": one}
