"""An app as Kubernetes objects: a Deployment whose pods pull the weights (read-only) into a
volume of their own and serve them with vLLM's OpenAI-compatible server, a Service, and, when
the app autoscales, a HorizontalPodAutoscaler or (where KEDA is installed: scale to zero) a KEDA
ScaledObject. No Ingress: the user-content gateway serves every app on its own host
(`app-<id>.<USER_CONTENT_DOMAIN>`), asks the panel for the caller's project API token before
every request unless the app is public, and sends what it lets through to this Service; the
panel counts those requests (`ajuste_app_requests_total`), the rate the autoscalers read.

Rolling updates never lower the capacity (maxUnavailable 0, maxSurge 1): a new model or
adapter starts one new pod at a time, and an old pod goes only once a new one answers its
readiness probe. The caller's `Authorization` header never reaches the server: the gateway
sends the one the panel answers (none, for an app), so a token is never logged by a server
that never sees it.

The pods are restricted like job pods: the `restricted` Pod Security Standard, no
service-account token, the datastore credentials in the pull container only, as files.
"""

from __future__ import annotations

from deploy import names
from deploy.kinds import DeploySpec
from deploy.manifests.common import (
    SHM_PATH,
    WORKSPACE,
    Manifest,
    datastore_volume,
    http_service,
    metadata,
    pod_base,
    shm_volume,
    sync_container,
    sync_state_volume,
    user_env,
    user_limits,
    workload_annotations,
)
from deploy.manifests.kueue import PRIORITY_LABEL, QUEUE_LABEL
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, AppRequest, WorkloadKind

COMPONENT = "app"
# vLLM loads the weights before its probe answers: at most this long (30 min) before the
# kubelet restarts it; the readiness and liveness probes start counting after that.
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 180
# A rollout that has not progressed for this long is reported as failed by the Deployment.
PROGRESS_DEADLINE_S = 1800
# The largest LoRA rank the server accepts (vLLM's default, 16, refuses larger adapters).
MAX_LORA_RANK = 64
# The suffix of the base model's id when an adapter is served under the app's model name.
BASE_SUFFIX = "-base"
# autoscaling/v2 `Pods` metric for a requests-per-second target without KEDA: served by a
# custom metrics adapter (prometheus-adapter) from the panel's count of the gateway's requests.
RPS_METRIC = "ajuste_app_requests_per_second"
# KEDA's Prometheus trigger: how long its poll and cool-down are.
KEDA_POLLING_S = 15
KEDA_COOLDOWN_S = 300
# A trigger that only wakes an app scaled to zero (any request counts) and keeps one replica
# while requests come: its threshold is far above any real rate per replica.
WAKE_THRESHOLD = "1000000"
SCALE_DOWN_WINDOW_S = 300
# The Service's port (to the server's `http` port): the gateway and the panel's "Try it" use it.
SERVICE_PORT = 80


def server_args(app: AppRequest) -> list[str]:
    """vLLM's arguments (the serving image's entrypoint is `vllm serve`). With an adapter,
    the adapter answers as the app's model name (`--enable-lora`) and the base model as
    `<name>-base`; several GPUs share the model (tensor parallelism)."""
    args = ["--model", APP_MODEL_PATH, "--host", "0.0.0.0", "--port", str(app.port)]  # noqa: S104
    gpus = app.flavor.gpus_per_unit * app.units
    if gpus > 1:
        args += ["--tensor-parallel-size", str(gpus)]
    if app.adapter is None:
        return [*args, "--served-model-name", app.served_name]
    return [
        *args,
        "--served-model-name",
        app.served_name + BASE_SUFFIX,
        "--enable-lora",
        "--max-lora-rank",
        str(MAX_LORA_RANK),
        "--lora-modules",
        f"{app.served_name}={APP_ADAPTER_PATH}",
    ]


def make_app_deployment(*, app: AppRequest, keep_replicas: bool = False) -> Manifest:
    """The app's pods. A stopped app has zero replicas (and the `stopped` annotation "true",
    which tells a stop from a scale to zero). An autoscaled app gets its lower bound (at least one)
    when it is created or started, and no count afterwards (`keep_replicas`): the autoscaler
    owns it, and applying a new template must not reset it."""
    ref = app.ref
    labels = names.workload_labels(ref, component=COMPONENT)
    if app.queue_name:  # Kueue's Deployment integration queues each pod as a plain pod
        labels[QUEUE_LABEL] = app.queue_name
        if app.priority_class:
            labels[PRIORITY_LABEL] = app.priority_class
    annotations = {**workload_annotations(ref, app.labels), names.URL: app.url}
    spec: Manifest = {}
    if not app.running:
        spec["replicas"] = 0
    elif app.scaling.fixed:
        spec["replicas"] = app.scaling.min_replicas
    elif not keep_replicas:
        spec["replicas"] = max(1, app.scaling.min_replicas)
    spec.update(
        {
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": PROGRESS_DEADLINE_S,
            "selector": {"matchLabels": names.selector_labels(ref)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                "spec": _pod_spec(app),
            },
        }
    )
    # Always there ("false" too): a merge patch cannot drop an annotation by leaving it out.
    meta_annotations = {**annotations, names.STOPPED: "false" if app.running else "true"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(
            name=names.app_name(ref),
            namespace=app.namespace,
            labels=labels,
            annotations=meta_annotations,
        ),
        "spec": spec,
    }


def make_app_service(*, app: AppRequest) -> Manifest:
    """ClusterIP Service in front of the server's port."""
    return http_service(_meta(app), app.ref, SERVICE_PORT)


def make_app_autoscaler(*, app: AppRequest) -> Manifest | None:
    """What scales a running autoscaled app: a KEDA ScaledObject where KEDA is installed,
    else a HorizontalPodAutoscaler; None for a fixed count or a stopped app."""
    if app.scaling.fixed or not app.running:
        return None
    if app.keda:
        return make_app_scaled_object(app=app)
    return make_app_hpa(app=app)


def make_app_hpa(*, app: AppRequest) -> Manifest:
    """autoscaling/v2: average CPU as a percent of the request, or requests per second per
    replica (a `Pods` metric from the custom metrics API). The HPA never scales to zero."""
    scaling = app.scaling
    metric: Manifest
    target: Manifest
    if scaling.target_rps is not None:
        target = {"type": "AverageValue", "averageValue": quantity(scaling.target_rps)}
        metric = {"type": "Pods", "pods": {"metric": {"name": RPS_METRIC}, "target": target}}
    else:
        target = {"type": "Utilization", "averageUtilization": scaling.target_cpu or 80}
        metric = {"type": "Resource", "resource": {"name": "cpu", "target": target}}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(app),
        "spec": {
            "scaleTargetRef": _target(app),
            "minReplicas": max(1, scaling.min_replicas),
            "maxReplicas": scaling.max_replicas,
            "metrics": [metric],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S}},
        },
    }


def make_app_scaled_object(*, app: AppRequest) -> Manifest:
    """keda.sh/v1alpha1 ScaledObject (a CRD: its shape is checked by our tests, not by the
    official schemas). Requests per second come from Prometheus (the panel's count of the
    requests the gateway let through to this app, which grows even with no pod, so a request
    wakes an app scaled to zero); CPU from the metrics server, with a wake-up trigger when the
    lower bound is zero (KEDA's CPU scaler alone never scales from zero)."""
    scaling = app.scaling
    triggers: list[Manifest] = []
    if scaling.target_rps is not None:
        triggers.append(_requests_trigger(app, quantity(scaling.target_rps)))
    else:
        value = str(scaling.target_cpu or 80)
        triggers.append({"type": "cpu", "metricType": "Utilization", "metadata": {"value": value}})
        if scaling.min_replicas == 0:
            triggers.append(_requests_trigger(app, WAKE_THRESHOLD))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _meta(app),
        "spec": {
            "scaleTargetRef": _target(app),
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": KEDA_POLLING_S,
            "cooldownPeriod": KEDA_COOLDOWN_S,
            "triggers": triggers,
        },
    }


def requests_query(app: AppRequest) -> str:
    """Requests per second the gateway let through to the app, as the panel counts them
    (controlpanel/core/metrics: `ajuste_app_requests_total`, scraped from the web pods)."""
    selector = f'app_namespace="{app.namespace}",app="{names.app_name(app.ref)}"'
    return f"sum(rate(ajuste_app_requests_total{{{selector}}}[1m]))"


def quantity(value: float) -> str:
    """A number as a Kubernetes quantity: `12`, or `2500m` for 2.5."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _requests_trigger(app: AppRequest, threshold: str) -> Manifest:
    return {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": app.prometheus_url,
            "query": requests_query(app),
            "threshold": threshold,
            "activationThreshold": "0",
        },
    }


def _meta(app: AppRequest) -> Manifest:
    ref = app.ref
    return metadata(
        name=names.app_name(ref),
        namespace=app.namespace,
        labels=names.workload_labels(ref, component=COMPONENT),
        annotations=workload_annotations(ref, {}),
    )


def _target(app: AppRequest) -> Manifest:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": names.app_name(app.ref)}


def _pod_spec(app: AppRequest) -> Manifest:
    pod = pod_base(app.flavor, app.image_pull_secrets, 60)
    pod["initContainers"] = [
        sync_container(app, name="pull", action="pull", volumes=app.pulled_volumes, subpaths=False)
    ]
    pod["containers"] = [_server_container(app)]
    pod["volumes"] = [
        {"name": "workspace", "emptyDir": {"sizeLimit": f"{app.model_gib}Gi"}},
        shm_volume(app.flavor, app.units),
        datastore_volume(app.datastore_secret),
        sync_state_volume(),
    ]
    return pod


def _server_container(app: AppRequest) -> Manifest:
    container: Manifest = {"name": "main", "image": app.image}
    if app.command is not None:
        container["command"] = list(app.command)
    else:
        container["args"] = server_args(app)
    container["workingDir"] = WORKSPACE
    container["ports"] = [{"name": "http", "containerPort": app.port, "protocol": "TCP"}]
    # The weights are on disk: nothing is fetched from a model hub.
    container["env"] = user_env(app, first={"HF_HUB_OFFLINE": "1"})
    container.update(user_limits(app))
    probe = {"httpGet": {"path": app.probe_path, "port": "http"}}
    container["startupProbe"] = {
        **probe,
        "periodSeconds": STARTUP_PERIOD_S,
        "failureThreshold": STARTUP_FAILURES,
    }
    container["readinessProbe"] = {**probe, "periodSeconds": 5, "failureThreshold": 3}
    container["livenessProbe"] = {
        **probe,
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 6,
    }
    # The weights are read-only to the server; only the pull container writes them.
    container["volumeMounts"] = [
        {"name": "workspace", "mountPath": WORKSPACE, "readOnly": True},
        {"name": "dshm", "mountPath": SHM_PATH},
    ]
    return container


# The app kind's entry in the deploy registry (`deploy.kinds`).
SPEC = DeploySpec(
    kind=WorkloadKind.APP,
    object_name=names.app_name,
    component=COMPONENT,
    running=(
        "HorizontalPodAutoscaler",
        "ScaledObject",
        "Deployment",
        "ReplicaSet",
        "Service",
        "Ingress",
        "Pod",
    ),
    cluster="deploy.kubernetes.app_kind",
    server="server",
    keeps_workspace=False,
    replica_per_start=True,
)
