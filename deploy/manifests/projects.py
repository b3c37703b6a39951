"""A project's namespace and guard rails: Pod Security `restricted`, quotas, container
defaults without a GPU default, default-deny networking with DNS, user-content gateway and S3
exceptions, the datastore Secret, and the RoleBinding that lets the panel manage it.
"""

from __future__ import annotations

from deploy import names
from deploy.egress import excluded_ranges
from deploy.manifests.common import Manifest, metadata
from deploy.types import EgressRule, ProjectRequest

PROJECT_ROLE = "ajuste-project"
QUOTA_NAME = "ajuste-quota"
LIMITS_NAME = "ajuste-defaults"
NOTEBOOK_PORT = 8888
# The panel's web pods (k8s/web.yaml): "Try it" reaches apps through their Service.
PANEL_WEB_LABELS = {"app.kubernetes.io/name": "ajuste", "app.kubernetes.io/component": "web"}
# The user-content gateway's pods (k8s/components/usercontent-gateway), in the panel's namespace:
# the only peer notebooks and apps take requests from, whatever routes to the gateway.
GATEWAY_LABELS = {"app.kubernetes.io/name": "ajuste", "app.kubernetes.io/component": "gateway"}


def make_namespace(*, project: ProjectRequest) -> Manifest:
    """The namespace, enforcing the `restricted` Pod Security Standard."""
    labels = names.project_labels(project.slug, project.install)
    for mode in ("enforce", "audit", "warn"):
        labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        labels[f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(
            name=project.namespace,
            namespace=None,
            labels=labels,
            annotations={names.PROJECT: project.slug},
        ),
    }


def make_role_binding(
    *, project: ProjectRequest, service_account: str, service_account_namespace: str
) -> Manifest:
    """Binds the `ajuste-project` ClusterRole to the panel's ServiceAccount in this namespace
    only, so the panel holds namespaced rights (Secrets included) nowhere else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(project, "ajuste-controller"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": PROJECT_ROLE,
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": service_account,
                "namespace": service_account_namespace,
            }
        ],
    }


def make_resource_quota(*, project: ProjectRequest) -> Manifest:
    """At most `gpu_quota` GPUs requested at once in the namespace (and as many slices of each
    MIG profile a flavor asks for: an extended resource left out of a quota is unlimited), and
    the CPU, memory, pod and claim-storage quotas that are set (0: no limit). The panel queues
    jobs before these are reached; this is the cluster's own guarantee."""
    hard = {f"requests.{project.gpu_resource_key}": str(project.gpu_quota)}
    for resource in project.mig_resources:
        hard[f"requests.{resource}"] = str(project.gpu_quota)
    if project.cpu_quota:
        hard["requests.cpu"] = str(project.cpu_quota)
    if project.memory_gib_quota:
        hard["requests.memory"] = f"{project.memory_gib_quota}Gi"
    if project.pod_quota:
        hard["pods"] = str(project.pod_quota)
    if project.storage_gib_quota:
        hard["requests.storage"] = f"{project.storage_gib_quota}Gi"
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(project, QUOTA_NAME),
        "spec": {"hard": hard},
    }


def make_limit_range(*, project: ProjectRequest) -> Manifest:
    """CPU/memory defaults for containers that set none; deliberately no GPU default, so a
    pod never gets a GPU it did not ask for."""
    amounts = {"cpu": project.default_cpu, "memory": project.default_memory}
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta(project, LIMITS_NAME),
        "spec": {
            "limits": [{"type": "Container", "default": amounts, "defaultRequest": dict(amounts)}]
        },
    }


def make_network_policies(*, project: ProjectRequest) -> list[Manifest]:
    """Default deny both ways, then DNS, the user-content gateway's pods (to notebooks' editor
    port and to apps, whose server's port each app chooses: app pods listen on nothing else),
    the panel's web pods to apps (its "Try it" box) and the project's egress rules (the S3
    endpoints). Peers are pods picked by label in the panel's namespace: no ingress
    controller's namespace (host-network controllers and Cilium's own proxy are no pods in
    one), and nothing that reaches the gateway reaches a notebook without passing it."""
    gateway = _panel_peer(project.panel_namespace, GATEWAY_LABELS)
    policies = [
        _policy(project, "ajuste-default-deny", {}, ingress=[], egress=[]),
        _policy(project, "ajuste-allow-dns", {}, egress=_dns_rules(project)),
        _policy(
            project,
            "ajuste-allow-gateway",
            {names.KIND: "notebook"},
            ingress=[{"from": [gateway], "ports": [{"protocol": "TCP", "port": NOTEBOOK_PORT}]}],
        ),
        _policy(
            project,
            "ajuste-allow-gateway-apps",
            {names.KIND: "app"},
            ingress=[{"from": [gateway]}],
        ),
        _policy(
            project,
            "ajuste-allow-panel-apps",
            {names.KIND: "app"},
            ingress=[{"from": [_panel_peer(project.panel_namespace, PANEL_WEB_LABELS)]}],
        ),
    ]
    if project.egress:
        rules = [_egress_rule(rule, project.private_allowed) for rule in project.egress]
        policies.append(_policy(project, "ajuste-allow-egress", {}, egress=rules))
    return policies


def make_datastore_secret(*, project: ProjectRequest) -> Manifest:
    """The credentials pods get (`project.datastores`: scoped to the project's buckets where
    the datastore can issue such keys) as `<ALIAS>.<field>` keys, mounted as files into the
    sync containers only (`common.datastore_volume`). A datastore the project no longer has
    buckets on is absent, and applying drops its keys from the cluster's Secret."""
    data: dict[str, str] = {}
    for datastore in project.datastores:
        data.update(datastore.to_files(pod=True))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(project, project.datastore_secret),
        "type": "Opaque",
        "stringData": dict(sorted(data.items())),
    }


def make_project_secrets(*, project: ProjectRequest) -> Manifest:
    """The secrets the project's managers set, one key each: jobs read them with
    `secretKeyRef` (`common.secret_env_list`). A deleted secret is absent, and applying
    drops its key from the cluster's Secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(project, project.project_secrets),
        "type": "Opaque",
        "stringData": dict(sorted(project.secrets.items())),
    }


def make_project_objects(
    *, project: ProjectRequest, service_account: str, service_account_namespace: str
) -> list[Manifest]:
    """Every object of a project, in the order they must be applied."""
    return [
        make_namespace(project=project),
        make_role_binding(
            project=project,
            service_account=service_account,
            service_account_namespace=service_account_namespace,
        ),
        make_resource_quota(project=project),
        make_limit_range(project=project),
        *make_network_policies(project=project),
        make_datastore_secret(project=project),
        make_project_secrets(project=project),
    ]


def _meta(project: ProjectRequest, name: str) -> Manifest:
    return metadata(
        name=name,
        namespace=project.namespace,
        labels=names.project_labels(project.slug, project.install),
        annotations={},
    )


def _policy(
    project: ProjectRequest,
    name: str,
    pod_labels: dict[str, str],
    *,
    ingress: list[Manifest] | None = None,
    egress: list[Manifest] | None = None,
) -> Manifest:
    spec: Manifest = {"podSelector": {"matchLabels": pod_labels} if pod_labels else {}}
    types = []
    if ingress is not None:
        spec["ingress"] = ingress
        types.append("Ingress")
    if egress is not None:
        spec["egress"] = egress
        types.append("Egress")
    spec["policyTypes"] = types
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(project, name),
        "spec": spec,
    }


def _dns_rules(project: ProjectRequest) -> list[Manifest]:
    """DNS to the cluster's resolvers only (and a node-local cache when one is set): port 53
    to any address would be a tunnel out of default deny. OpenShift's DNS pods listen on 5353
    behind their Service, and policies see the pod's port."""
    peers = [_peer(rule, project.private_allowed) for rule in project.dns]
    return [{"to": peers, "ports": [*_tcp_udp(53), *_tcp_udp(5353)]}]


def _tcp_udp(port: int) -> list[Manifest]:
    return [{"protocol": "UDP", "port": port}, {"protocol": "TCP", "port": port}]


def _panel_peer(namespace: str, labels: dict[str, str]) -> Manifest:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": dict(labels)},
    }


def _egress_rule(rule: EgressRule, private_allowed: tuple[str, ...]) -> Manifest:
    result: Manifest = {"to": [_peer(rule, private_allowed)]}
    if rule.ports:
        result["ports"] = [{"protocol": "TCP", "port": port} for port in rule.ports]
    return result


def _peer(rule: EgressRule, private_allowed: tuple[str, ...]) -> Manifest:
    """An address block (wide ones without the private and link-local ranges, see
    `deploy.egress`) or pods of a namespace."""
    peer: Manifest = {}
    if rule.cidr:
        peer["ipBlock"] = {"cidr": rule.cidr}
        excluded = excluded_ranges(rule.cidr, private_allowed)
        if excluded:
            peer["ipBlock"]["except"] = excluded
    if rule.namespace:
        peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": rule.namespace}}
        if rule.pod_labels:
            peer["podSelector"] = {"matchLabels": dict(rule.pod_labels)}
    return peer
