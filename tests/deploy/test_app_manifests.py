"""An app as Kubernetes objects: literal dicts, forward-auth, scaling, and validation against
the official schemas (1.30, the oldest supported, and the emulator's)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from deploy import manifests
from deploy.manifests import (
    make_app_autoscaler,
    make_app_deployment,
    make_app_hpa,
    make_app_scaled_object,
    make_app_service,
)
from deploy.manifests.apps import quantity, requests_query
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, AppRequest, Scaling
from storage.volumes import Mode, VolumeSpec
from tests.deploy.conftest import A100_MIG, CPU, DATASET, H100, INSTALL, validate
from tests.deploy.test_manifests_job import (
    CONTAINER_SECURITY,
    DATASTORES_VOLUME,
    POD_SECURITY,
    STATE,
    SYNC,
    WORKSPACE_MOUNT,
    sync_container,
)

APP_ID = "5f0c"
NS = "ajuste-vision"
MODEL = VolumeSpec("models", "GRA", "llama-3-8b", APP_MODEL_PATH, Mode.RO)
ADAPTER = VolumeSpec("corpus", "GRA", "runs/42/adapter", APP_ADAPTER_PATH, Mode.RO)
SELECTOR = {
    "app.kubernetes.io/managed-by": "ajuste",
    "ajuste.io/project": "vision",
    "ajuste.io/kind": "app",
    "ajuste.io/id": APP_ID,
}
# The selector leaves the install out (a Deployment's selector never changes); labels carry it.
LABELS = {**SELECTOR, "ajuste.io/component": "app", "ajuste.io/install": INSTALL}
ANNOTATIONS = {"ajuste.io/project": "vision", "ajuste.io/id": APP_ID}
URL = "https://app-5f0c.usercontent.ajuste.example/"
TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app-5f0c"}
PROBE = {"httpGet": {"path": "/health", "port": "http"}}
SERVING = "ghcr.io/ajuste/serving:0.1.0"


def make_app_request(**changes: Any) -> AppRequest:
    """An app serving a LoRA adapter over Llama 3 8B on two H100s, one extra ro volume."""
    values: dict[str, Any] = {
        "id": APP_ID,
        "project": "vision",
        "namespace": NS,
        "name": "support-bot",
        "image": SERVING,
        "flavor": H100,
        "units": 2,
        "model": MODEL,
        "adapter": ADAPTER,
        "served_name": "support-bot",
        "volumes": (DATASET,),
        "env": {"VLLM_LOGGING_LEVEL": "INFO", "HF_TOKEN": "hf"},
        "secret_env": {"HF_TOKEN": "hf"},
        "host": "app-5f0c.usercontent.ajuste.example",
        "path": "/",
        "model_gib": 40,
        "install": INSTALL,
    }
    values.update(changes)
    return AppRequest(**values)


@pytest.fixture
def app_request() -> AppRequest:
    return make_app_request()


def validate_130(manifest: dict[str, Any]) -> None:
    """The oldest Kubernetes the objects must pass, strictly, and the emulator's."""
    kubernetes_validate.validate(manifest, "1.30.0", strict=True)
    validate(manifest)


def test_deployment_pulls_the_weights_and_serves_the_adapter(app_request: AppRequest) -> None:
    mounts = (WORKSPACE_MOUNT, {"name": "sync-state", "mountPath": "/ajuste-sync"})
    pull = sync_container(
        "pull",
        [
            *SYNC,
            "pull",
            "models@GRA/llama-3-8b:/workspace/model:ro",
            "corpus@GRA/runs/42/adapter:/workspace/adapter:ro",
            "corpus@GRA/dataset:/workspace/data:ro",
            "--root",
            "/",
            *STATE,
        ],
        mounts,
    )
    two_gpus = {"cpu": "52", "memory": "400Gi", "nvidia.com/gpu": "2"}
    annotations = {**ANNOTATIONS, "ajuste.io/url": URL}
    assert make_app_deployment(app=app_request) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "app-5f0c",
            "namespace": NS,
            "labels": LABELS,
            "annotations": {**annotations, "ajuste.io/stopped": "false"},
        },
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 1800,
            "selector": {"matchLabels": SELECTOR},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": LABELS, "annotations": annotations},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": POD_SECURITY,
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "initContainers": [pull],
                    "containers": [
                        {
                            "name": "main",
                            "image": SERVING,
                            "args": [
                                "--model",
                                "/workspace/model",
                                "--host",
                                "0.0.0.0",  # noqa: S104
                                "--port",
                                "8000",
                                "--tensor-parallel-size",
                                "2",
                                "--served-model-name",
                                "support-bot-base",
                                "--enable-lora",
                                "--max-lora-rank",
                                "64",
                                "--lora-modules",
                                "support-bot=/workspace/adapter",
                            ],
                            "workingDir": "/workspace",
                            "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                            "env": [
                                {"name": "HF_HUB_OFFLINE", "value": "1"},
                                {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
                                {
                                    "name": "HF_TOKEN",
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": "ajuste-project-secrets",
                                            "key": "hf",
                                        }
                                    },
                                },
                            ],
                            "resources": {"requests": two_gpus, "limits": two_gpus},
                            "securityContext": CONTAINER_SECURITY,
                            "startupProbe": {**PROBE, "periodSeconds": 10, "failureThreshold": 180},
                            "readinessProbe": {**PROBE, "periodSeconds": 5, "failureThreshold": 3},
                            "livenessProbe": {
                                **PROBE,
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                                "failureThreshold": 6,
                            },
                            "volumeMounts": [
                                {"name": "workspace", "mountPath": "/workspace", "readOnly": True},
                                {"name": "dshm", "mountPath": "/dev/shm"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "workspace", "emptyDir": {"sizeLimit": "40Gi"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "100Gi"}},
                        DATASTORES_VOLUME,
                        {"name": "sync-state", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }


def test_a_merged_model_on_cpu_has_no_lora_and_no_gpu(app_request: AppRequest) -> None:
    app = replace(app_request, flavor=CPU, units=1, adapter=None, port=9000, probe_path="/ready")
    pod = make_app_deployment(app=app)["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["args"] == [
        "--model",
        "/workspace/model",
        "--host",
        "0.0.0.0",  # noqa: S104
        "--port",
        "9000",
        "--served-model-name",
        "support-bot",
    ]
    assert server["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert server["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]
    assert server["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert pod["initContainers"][0]["command"][3:5] == [
        "pull",
        "models@GRA/llama-3-8b:/workspace/model:ro",
    ]


def test_a_mig_app_serves_on_one_slice(app_request: AppRequest) -> None:
    app = replace(app_request, flavor=A100_MIG, units=1)
    manifest = make_app_deployment(app=app)
    validate(manifest)
    server = manifest["spec"]["template"]["spec"]["containers"][0]
    one = {"cpu": "8", "memory": "60Gi", "nvidia.com/mig-3g.40gb": "1"}
    assert server["resources"] == {"requests": one, "limits": one}
    assert "--tensor-parallel-size" not in server["args"]


def test_an_image_with_its_own_command_gets_no_vllm_arguments(app_request: AppRequest) -> None:
    app = replace(app_request, image="registry.example/tgi:2", command=("serve", "--port", "8000"))
    server = make_app_deployment(app=app)["spec"]["template"]["spec"]["containers"][0]
    assert (server["image"], server["command"]) == (
        "registry.example/tgi:2",
        ["serve", "--port", "8000"],
    )
    assert "args" not in server


def test_only_the_pull_container_sees_credentials_and_writes_the_weights(
    app_request: AppRequest,
) -> None:
    pod = make_app_deployment(app=app_request)["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert all(m["name"] != "datastores" for m in server["volumeMounts"])
    assert {"name": "workspace", "mountPath": "/workspace", "readOnly": True} in server[
        "volumeMounts"
    ]
    assert "AJUSTE_DATASTORE_DIR" not in {e["name"] for e in server["env"]}
    assert pod["automountServiceAccountToken"] is False


def test_stopped_app_has_no_replicas_and_says_it_was_stopped(app_request: AppRequest) -> None:
    stopped = make_app_deployment(app=replace(app_request, running=False))
    assert stopped["spec"]["replicas"] == 0
    assert stopped["metadata"]["annotations"]["ajuste.io/stopped"] == "true"
    assert "ajuste.io/stopped" not in stopped["spec"]["template"]["metadata"]["annotations"]
    assert make_app_autoscaler(app=replace(app_request, running=False)) is None


def test_fixed_replicas_and_an_autoscaler_owning_the_count(app_request: AppRequest) -> None:
    three = replace(app_request, scaling=Scaling(min_replicas=3, max_replicas=3))
    assert make_app_deployment(app=three)["spec"]["replicas"] == 3
    assert make_app_deployment(app=three, keep_replicas=True)["spec"]["replicas"] == 3
    assert make_app_autoscaler(app=three) is None
    auto = replace(app_request, scaling=Scaling(min_replicas=2, max_replicas=6, target_cpu=70))
    assert make_app_deployment(app=auto)["spec"]["replicas"] == 2  # created or started
    assert "replicas" not in make_app_deployment(app=auto, keep_replicas=True)["spec"]
    to_zero = replace(
        app_request, keda=True, scaling=Scaling(min_replicas=0, max_replicas=4, target_rps=5)
    )
    assert make_app_deployment(app=to_zero)["spec"]["replicas"] == 1  # answers at once


def test_service_in_front_of_the_server(app_request: AppRequest) -> None:
    assert make_app_service(app=app_request) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "app-5f0c",
            "namespace": NS,
            "labels": LABELS,
            "annotations": ANNOTATIONS,
        },
        "spec": {
            "type": "ClusterIP",
            "selector": SELECTOR,
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def test_no_ingress_the_gateway_serves_it(app_request: AppRequest) -> None:
    """The user-content gateway serves every app on its own host and reaches it through the
    Service: no per-app Ingress, no ingress controller's annotation."""
    assert not hasattr(manifests, "make_app_ingress")
    deployment = make_app_deployment(app=app_request)
    assert not [k for k in deployment["metadata"]["annotations"] if "ingress" in k]


def test_hpa_on_cpu(app_request: AppRequest) -> None:
    app = replace(app_request, scaling=Scaling(min_replicas=1, max_replicas=5, target_cpu=70))
    hpa = make_app_autoscaler(app=app)
    assert hpa == make_app_hpa(app=app)
    assert hpa == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "app-5f0c",
            "namespace": NS,
            "labels": LABELS,
            "annotations": ANNOTATIONS,
        },
        "spec": {
            "scaleTargetRef": TARGET,
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 70},
                    },
                }
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def test_hpa_on_requests_per_second(app_request: AppRequest) -> None:
    app = replace(app_request, scaling=Scaling(min_replicas=2, max_replicas=8, target_rps=2.5))
    assert make_app_hpa(app=app)["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "ajuste_app_requests_per_second"},
                "target": {"type": "AverageValue", "averageValue": "2500m"},
            },
        }
    ]
    assert make_app_hpa(app=app)["spec"]["minReplicas"] == 2


def test_keda_scales_to_zero_on_requests_per_second(app_request: AppRequest) -> None:
    app = replace(
        app_request, keda=True, scaling=Scaling(min_replicas=0, max_replicas=4, target_rps=10)
    )
    scaled = make_app_autoscaler(app=app)
    assert scaled == make_app_scaled_object(app=app)
    query = 'sum(rate(ajuste_app_requests_total{app_namespace="ajuste-vision",app="app-5f0c"}[1m]))'
    assert requests_query(app) == query
    assert scaled == {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": "app-5f0c",
            "namespace": NS,
            "labels": LABELS,
            "annotations": ANNOTATIONS,
        },
        "spec": {
            "scaleTargetRef": TARGET,
            "minReplicaCount": 0,
            "maxReplicaCount": 4,
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                        "query": query,
                        "threshold": "10",
                        "activationThreshold": "0",
                    },
                }
            ],
        },
    }


def test_keda_on_cpu_wakes_on_a_request_when_scaled_to_zero(app_request: AppRequest) -> None:
    scaling = Scaling(min_replicas=0, max_replicas=3, target_cpu=60)
    triggers = make_app_scaled_object(app=replace(app_request, keda=True, scaling=scaling))["spec"][
        "triggers"
    ]
    assert triggers[0] == {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}
    assert [t["type"] for t in triggers] == ["cpu", "prometheus"]
    assert triggers[1]["metadata"]["threshold"] == "1000000"
    elsewhere = replace(app_request, keda=True, scaling=scaling, prometheus_url="http://prom:9090")
    woken = make_app_scaled_object(app=elsewhere)["spec"]["triggers"][1]
    assert woken["metadata"]["serverAddress"] == "http://prom:9090"
    one = replace(scaling, min_replicas=1)
    only_cpu = make_app_scaled_object(app=replace(app_request, keda=True, scaling=one))
    assert [t["type"] for t in only_cpu["spec"]["triggers"]] == ["cpu"]


def test_scaled_object_has_keda_v1alpha1_shape(app_request: AppRequest) -> None:
    """A CRD, so no official schema: the fields KEDA requires, with their types."""
    for scaling in (
        Scaling(min_replicas=0, max_replicas=4, target_rps=0.5),
        Scaling(min_replicas=0, max_replicas=2, target_cpu=80),
    ):
        scaled = make_app_scaled_object(app=replace(app_request, keda=True, scaling=scaling))
        spec = scaled["spec"]
        assert set(spec) <= {
            "scaleTargetRef",
            "minReplicaCount",
            "maxReplicaCount",
            "pollingInterval",
            "cooldownPeriod",
            "triggers",
        }
        assert spec["scaleTargetRef"]["name"] == "app-5f0c"
        assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        for trigger in spec["triggers"]:
            assert trigger["type"] in ("cpu", "prometheus")
            assert all(isinstance(v, str) for v in trigger["metadata"].values())
            if trigger["type"] == "prometheus":
                assert set(trigger["metadata"]) == {
                    "serverAddress",
                    "query",
                    "threshold",
                    "activationThreshold",
                }


@pytest.mark.parametrize(("value", "text"), [(10, "10"), (2.5, "2500m"), (0.25, "250m")])
def test_quantity(value: float, text: str) -> None:
    assert quantity(value) == text


def test_every_core_app_object_is_valid(app_request: AppRequest) -> None:
    for app in (
        app_request,
        replace(app_request, adapter=None, flavor=CPU, units=1, public=True),
        replace(app_request, running=False),
        replace(app_request, command=("python", "-m", "server")),
    ):
        validate_130(make_app_deployment(app=app))
        validate_130(make_app_deployment(app=app, keep_replicas=True))
        validate_130(make_app_service(app=app))
    for scaling in (
        Scaling(min_replicas=1, max_replicas=5, target_cpu=70),
        Scaling(min_replicas=2, max_replicas=10, target_rps=2.5),
    ):
        validate_130(make_app_hpa(app=replace(app_request, scaling=scaling)))
