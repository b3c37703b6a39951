"""A notebook as Kubernetes objects: a one-replica StatefulSet (replicas 0 when stopped) whose
claim template keeps /workspace across stop and start, and a Service. No Ingress: the
user-content gateway (images/gateway, k8s/components/usercontent-gateway) serves every notebook
on its own host (`nb-<id>.<USER_CONTENT_DOMAIN>`) and sends what the panel lets through to this
Service; the project's NetworkPolicy lets nothing else reach the editor's port.

A second lock behind it: JupyterLab requires its own token, kept in the notebook's Secret and
read from a file (never the environment, which kernels and tools copy around). The panel's
answer to the gateway carries `Authorization: token <t>`, which the gateway puts on the request
it sends upstream; the browser never holds the token.
"""

from __future__ import annotations

from deploy import names
from deploy.kinds import DeploySpec
from deploy.manifests.common import (
    SECRET_FILE_MODE,
    WORKSPACE,
    Manifest,
    datastore_volume,
    http_service,
    main_mounts,
    metadata,
    pod_base,
    pull_and_push,
    shm_volume,
    sync_state_volume,
    user_env,
    user_limits,
    workload_annotations,
)
from deploy.manifests.kueue import PRIORITY_LABEL, QUEUE_LABEL
from deploy.types import Editor, NotebookRequest, WorkloadKind

# The pod that runs the editor.
COMPONENT = "notebook"

PORT = 8888
# The Service's port (to the editor's `http` port): the user-content gateway sends requests there.
SERVICE_PORT = 80
TOKEN_KEY = "token"  # noqa: S105  (a key name, not a secret)
TOKEN_VOLUME = "editor-token"  # noqa: S105
TOKEN_DIR = "/ajuste-editor"  # noqa: S105
# What would replace the token file's token: the editor's environment never takes them from
# the user (JUPYTER_TOKEN wins over JUPYTER_TOKEN_FILE in jupyter_server).
TOKEN_ENV = ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")


def editor_command(notebook: NotebookRequest) -> list[str]:
    """The editor's command line, serving at the root of the notebook's own host. JupyterLab
    takes its token from JUPYTER_TOKEN_FILE (the notebook's Secret); code-server has no token
    it could take from a header, so the gateway's check alone guards it."""
    if notebook.command is not None:
        return list(notebook.command)
    if notebook.editor is Editor.VSCODE:
        return [
            "code-server",
            f"--bind-addr=0.0.0.0:{PORT}",
            "--auth=none",
            "--disable-telemetry",
            WORKSPACE,
        ]
    return [
        "jupyter",
        "lab",
        "--ip=0.0.0.0",
        f"--port={PORT}",
        "--no-browser",
        f"--ServerApp.base_url={notebook.path}",
        f"--ServerApp.root_dir={WORKSPACE}",
        "--ServerApp.trust_xheaders=True",
    ]


def make_notebook_statefulset(*, notebook: NotebookRequest) -> Manifest:
    """One replica while running, zero when stopped; the claim survives both."""
    ref = notebook.ref
    labels = names.workload_labels(ref, component=COMPONENT)
    annotations = {**workload_annotations(ref, notebook.labels), names.URL: notebook.url}
    name = names.notebook_name(ref)
    claim = {
        "metadata": {"name": "workspace", "labels": dict(labels)},
        "spec": _claim_spec(notebook),
    }
    meta = metadata(name=name, namespace=notebook.namespace, labels=labels, annotations=annotations)
    if notebook.queue_name:  # Kueue's StatefulSet integration admits (ungates) its pod
        meta["labels"][QUEUE_LABEL] = notebook.queue_name
        if notebook.priority_class:
            meta["labels"][PRIORITY_LABEL] = notebook.priority_class
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "replicas": 1 if notebook.running else 0,
            "serviceName": name,
            "selector": {"matchLabels": names.selector_labels(ref)},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete",
                "whenScaled": "Retain",
            },
            "template": {
                "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                "spec": _pod_spec(notebook),
            },
            "volumeClaimTemplates": [claim],
        },
    }


def make_notebook_secret(*, notebook: NotebookRequest) -> Manifest:
    """The editor's token (a file in the editor container). A notebook without one is refused:
    an empty token file would leave JupyterLab open to anyone who reaches its Service."""
    if not notebook.token:
        raise ValueError("a notebook needs its editor token")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(notebook),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: notebook.token},
    }


def make_notebook_service(*, notebook: NotebookRequest) -> Manifest:
    """ClusterIP Service in front of the editor port."""
    return http_service(_meta(notebook), notebook.ref, SERVICE_PORT)


def _claim_spec(notebook: NotebookRequest) -> Manifest:
    spec: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{notebook.workspace_gib}Gi"}},
    }
    if notebook.storage_class:
        spec["storageClassName"] = notebook.storage_class
    return spec


def _pod_spec(notebook: NotebookRequest) -> Manifest:
    pod = pod_base(notebook.flavor, notebook.image_pull_secrets, 300)
    init = pull_and_push(notebook, subpaths=False)
    if init:
        pod["initContainers"] = init
    pod["containers"] = [_editor_container(notebook)]
    pod["volumes"] = [shm_volume(notebook.flavor, notebook.units), _token_volume(notebook)]
    if init:  # the sync containers' credentials; the editor never mounts them
        pod["volumes"].append(datastore_volume(notebook.datastore_secret))
        pod["volumes"].append(sync_state_volume())
    return pod


def _editor_container(notebook: NotebookRequest) -> Manifest:
    container: Manifest = {
        "name": "main",
        "image": notebook.image,
        "command": editor_command(notebook),
        "workingDir": WORKSPACE,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
    }
    token_file = {"JUPYTER_TOKEN_FILE": f"{TOKEN_DIR}/{TOKEN_KEY}"}
    container["env"] = user_env(notebook, last=token_file, drop=TOKEN_ENV)
    container.update(user_limits(notebook))
    container["readinessProbe"] = {
        "tcpSocket": {"port": "http"},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    token_mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}
    container["volumeMounts"] = [*main_mounts(subpaths=False), token_mount]
    return container


def _token_volume(notebook: NotebookRequest) -> Manifest:
    secret = {
        "secretName": names.notebook_name(notebook.ref),
        "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}],
        "defaultMode": SECRET_FILE_MODE,
    }
    return {"name": TOKEN_VOLUME, "secret": secret}


def _meta(notebook: NotebookRequest) -> Manifest:
    return metadata(
        name=names.notebook_name(notebook.ref),
        namespace=notebook.namespace,
        labels=names.workload_labels(notebook.ref, component=COMPONENT),
        annotations=workload_annotations(notebook.ref, {}),
    )


# The notebook kind's entry in the deploy registry (`deploy.kinds`). An orphan's Service,
# token Secret and any Ingress of an earlier version go with its pods.
SPEC = DeploySpec(
    kind=WorkloadKind.NOTEBOOK,
    object_name=names.notebook_name,
    component=COMPONENT,
    running=("StatefulSet", "Service", "Secret", "Ingress", "Pod"),
    cluster="deploy.kubernetes.notebook_kind",
    server="editor",
)
