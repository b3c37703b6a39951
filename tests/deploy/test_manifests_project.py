"""A project's namespace and guard rails: literal dicts and validation."""

from __future__ import annotations

from dataclasses import replace

from deploy.manifests import (
    make_datastore_secret,
    make_limit_range,
    make_namespace,
    make_network_policies,
    make_project_objects,
    make_project_secrets,
    make_resource_quota,
    make_role_binding,
)
from deploy.types import EgressRule, ProjectRequest
from tests.deploy.conftest import INSTALL, validate

LABELS = {
    "app.kubernetes.io/managed-by": "ajuste",
    "ajuste.io/project": "vision",
    "ajuste.io/kind": "project",
    "ajuste.io/install": INSTALL,
}


def meta(name: str) -> dict[str, object]:
    return {"name": name, "namespace": "ajuste-vision", "labels": LABELS}


def test_namespace_enforces_restricted_pod_security(project_request: ProjectRequest) -> None:
    security = {}
    for mode in ("enforce", "audit", "warn"):
        security[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        security[f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    assert make_namespace(project=project_request) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "ajuste-vision",
            "labels": {**LABELS, **security},
            "annotations": {"ajuste.io/project": "vision"},
        },
    }


def test_gpu_quota_and_defaults_without_gpu(project_request: ProjectRequest) -> None:
    assert make_resource_quota(project=project_request) == {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": meta("ajuste-quota"),
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
    }
    assert make_limit_range(project=project_request) == {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": meta("ajuste-defaults"),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "500m", "memory": "1Gi"},
                    "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                }
            ]
        },
    }


def test_cpu_memory_pod_and_storage_quotas(project_request: ProjectRequest) -> None:
    quotas = replace(
        project_request, cpu_quota=64, memory_gib_quota=512, pod_quota=20, storage_gib_quota=1000
    )
    quota = make_resource_quota(project=quotas)
    validate(quota)
    assert quota["spec"] == {
        "hard": {
            "requests.nvidia.com/gpu": "8",
            "requests.cpu": "64",
            "requests.memory": "512Gi",
            "pods": "20",
            "requests.storage": "1000Gi",
        }
    }
    # 0 is no limit; the GPU quota is always there (0 GPUs means none).
    unlimited = replace(quotas, gpu_quota=0, cpu_quota=0, memory_gib_quota=0, pod_quota=0)
    assert make_resource_quota(project=unlimited)["spec"] == {
        "hard": {"requests.nvidia.com/gpu": "0", "requests.storage": "1000Gi"}
    }


def test_each_mig_profile_a_flavor_asks_for_is_held_to_the_gpu_quota(
    project_request: ProjectRequest,
) -> None:
    """An extended resource a quota leaves out is unlimited: a project with no GPU would get
    MIG slices from the cluster if only nvidia.com/gpu were listed."""
    mig = replace(
        project_request,
        gpu_quota=0,
        mig_resources=("nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"),
    )
    quota = make_resource_quota(project=mig)
    validate(quota)
    assert quota["spec"] == {
        "hard": {
            "requests.nvidia.com/gpu": "0",
            "requests.nvidia.com/mig-1g.10gb": "0",
            "requests.nvidia.com/mig-3g.40gb": "0",
        }
    }


def test_default_deny_with_dns_the_gateway_and_s3(project_request: ProjectRequest) -> None:
    """Notebooks and apps take requests from the user-content gateway's pods only (picked by
    label in the panel's namespace), apps also from the web pods ("Try it"); no ingress
    controller's namespace is a peer."""

    def policy(name: str, spec: dict[str, object]) -> dict[str, object]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta(name),
            "spec": spec,
        }

    kube_system = {"kubernetes.io/metadata.name": "kube-system"}
    gateway = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ajuste"}},
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "ajuste",
                "app.kubernetes.io/component": "gateway",
            }
        },
    }
    dns_ports = [
        {"protocol": proto, "port": port} for port in (53, 5353) for proto in ("UDP", "TCP")
    ]
    assert make_network_policies(project=project_request) == [
        policy(
            "ajuste-default-deny",
            {"podSelector": {}, "ingress": [], "egress": [], "policyTypes": ["Ingress", "Egress"]},
        ),
        policy(
            "ajuste-allow-dns",
            {
                "podSelector": {},
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {"matchLabels": kube_system},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": dns_ports,
                    }
                ],
                "policyTypes": ["Egress"],
            },
        ),
        policy(
            "ajuste-allow-gateway",
            {
                "podSelector": {"matchLabels": {"ajuste.io/kind": "notebook"}},
                "ingress": [{"from": [gateway], "ports": [{"protocol": "TCP", "port": 8888}]}],
                "policyTypes": ["Ingress"],
            },
        ),
        policy(
            "ajuste-allow-gateway-apps",
            {
                "podSelector": {"matchLabels": {"ajuste.io/kind": "app"}},
                "ingress": [{"from": [gateway]}],
                "policyTypes": ["Ingress"],
            },
        ),
        policy(
            "ajuste-allow-panel-apps",
            {
                "podSelector": {"matchLabels": {"ajuste.io/kind": "app"}},
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "ajuste"}
                                },
                                "podSelector": {
                                    "matchLabels": {
                                        "app.kubernetes.io/name": "ajuste",
                                        "app.kubernetes.io/component": "web",
                                    }
                                },
                            }
                        ]
                    }
                ],
                "policyTypes": ["Ingress"],
            },
        ),
        policy(
            "ajuste-allow-egress",
            {
                "podSelector": {},
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
                        "ports": [{"protocol": "TCP", "port": 443}],
                    }
                ],
                "policyTypes": ["Egress"],
            },
        ),
    ]


def test_in_cluster_s3_egress_by_namespace(project_request: ProjectRequest) -> None:
    minio = EgressRule(namespace="minio", pod_labels={"app": "minio"}, ports=(9000,))
    policies = make_network_policies(project=replace(project_request, egress=(minio,)))
    assert policies[-1]["spec"]["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}},
                    "podSelector": {"matchLabels": {"app": "minio"}},
                }
            ],
            "ports": [{"protocol": "TCP", "port": 9000}],
        }
    ]


def test_secret_and_role_binding(project_request: ProjectRequest) -> None:
    assert make_datastore_secret(project=project_request) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta("ajuste-datastores"),
        "type": "Opaque",
        "stringData": {
            "GRA.access_key": "AKIA-GRA",
            "GRA.endpoint_url": "https://s3.gra.example",
            "GRA.region": "gra",
            "GRA.secret_key": "gra-secret",
        },
    }
    binding = make_role_binding(
        project=project_request,
        service_account="ajuste-controller",
        service_account_namespace="ajuste",
    )
    assert binding == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta("ajuste-controller"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "ajuste-project",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "ajuste-controller", "namespace": "ajuste"}
        ],
    }


def test_every_project_object_is_valid_and_in_apply_order(project_request: ProjectRequest) -> None:
    objects = make_project_objects(
        project=project_request,
        service_account="ajuste-controller",
        service_account_namespace="ajuste",
    )
    for manifest in objects:
        validate(manifest)
    kinds = [o["kind"] for o in objects]
    assert kinds[:2] == ["Namespace", "RoleBinding"]  # the rest needs the binding
    assert kinds.count("NetworkPolicy") == 6 and kinds[-2:] == ["Secret", "Secret"]
    assert [o["metadata"]["name"] for o in objects[-2:]] == [
        "ajuste-datastores",
        "ajuste-project-secrets",
    ]


def test_the_managers_secrets_are_one_secret_with_a_key_each(
    project_request: ProjectRequest,
) -> None:
    request = replace(project_request, secrets={"HF_TOKEN": "hf_abc", "WANDB_KEY": "w=1"})
    manifest = make_project_secrets(project=request)
    validate(manifest)
    assert manifest == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "ajuste-project-secrets",
            "namespace": "ajuste-vision",
            "labels": {
                "app.kubernetes.io/managed-by": "ajuste",
                "ajuste.io/project": "vision",
                "ajuste.io/kind": "project",
                "ajuste.io/install": INSTALL,
            },
        },
        "type": "Opaque",
        "stringData": {"HF_TOKEN": "hf_abc", "WANDB_KEY": "w=1"},
    }
    # a deleted secret is absent: applying the empty Secret drops its key
    assert make_project_secrets(project=project_request)["stringData"] == {}
    assert "hf_abc" not in repr(request)  # never in a log line of the request
