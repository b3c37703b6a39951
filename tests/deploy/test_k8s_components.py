"""k8s/components: each one, in an operator's overlay on k8s/, renders with the real kustomize
and validates strictly against Kubernetes 1.30 and the newest schemas kubernetes-validate ships.

The HTTPRoute (a Gateway API CRD) and the ServiceMonitor (a Prometheus Operator CRD) are not in
those schemas, and their CRDs are not available offline here: each is checked structurally
against the fields written out below (the HTTPRoute's from Gateway API v1.2.1's standard channel
CRD, read once by hand; the route also validated against that CRD's openAPIV3Schema then, not
in these tests): names, the types of the fields used, and the references. What the CRDs' own
CEL rules check is not covered."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_ajuste_on_kubernetes import (
    COMPONENTS,
    K8S,
    Obj,
    config,
    find,
    overlay,
    pod_of,
    validate,
)

HOST = "panel.corp.example"
CONTENT = "uc.corp.example"
# What an operator writes: the host, once, in the ConfigMap (the components copy it).
SITE = {
    "configMapGenerator": [
        {
            "name": "ajuste-config",
            "namespace": "ajuste",
            "behavior": "merge",
            "literals": [
                f"ALLOWED_HOSTS={HOST},old.corp.example",
                f"SITE_URL=https://{HOST}",
                f"USER_CONTENT_DOMAIN={CONTENT}",
            ],
        }
    ]
}
# The routes of the ingress and gateway-api components reach the user-content gateway too.
NEEDS = {
    "tls": ["usercontent-gateway", "ingress"],
    "ingress": ["usercontent-gateway"],
    "gateway-api": ["usercontent-gateway"],
}
CRDS = {"HTTPRoute", "ServiceMonitor"}


def render(tmp_path: Path, *names: str, **fields: Any) -> list[Obj]:
    wanted = [dep for name in names for dep in NEEDS.get(name, [])] + list(names)
    return overlay(tmp_path, components=list(dict.fromkeys(wanted)), **(SITE | fields))


def test_every_component_is_a_component() -> None:
    assert COMPONENTS == [
        "gateway-api",
        "ingress",
        "kueue",
        "large",
        "namespaced",
        "network-policy",
        "pdb",
        "postgres",
        "redis",
        "service-monitor",
        "tls",
        "topology-spread",
        "usercontent-gateway",
    ]
    for name in COMPONENTS:
        kustomization = yaml.safe_load(
            (K8S / "components" / name / "kustomization.yaml").read_text()
        )
        assert kustomization["kind"] == "Component", name


@pytest.mark.parametrize("name", [*COMPONENTS, "all"])
def test_renders_and_validates(tmp_path: Path, name: str) -> None:
    objects = render(tmp_path, *(COMPONENTS if name == "all" else [name]))
    for manifest in objects:
        if manifest["kind"] == "HTTPRoute":
            check_httproute(manifest)
        elif manifest["kind"] == "ServiceMonitor":
            check_service_monitor(manifest, objects)
        else:
            validate(manifest)
    for manifest in objects:
        if manifest["kind"] in ("Deployment", "StatefulSet"):
            assert_restricted(manifest["spec"]["template"]["spec"])
        cluster_wide = ("ClusterRole", "ValidatingAdmissionPolicy")
        if not manifest["kind"].startswith(cluster_wide):
            assert manifest["metadata"]["namespace"] == "ajuste", manifest["metadata"]


def assert_restricted(pod: Obj) -> None:
    """What the namespace's `restricted` Pod Security Standard demands of every container."""
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert set(container["resources"]) == {"requests", "limits"}


def test_ingress_takes_the_host_and_a_class(tmp_path: Path) -> None:
    patch = '[{"op": "replace", "path": "/spec/ingressClassName", "value": "traefik"}]'
    objects = render(
        tmp_path, "tls", patches=[{"target": {"kind": "Ingress", "name": "ajuste"}, "patch": patch}]
    )
    ingress = find(objects, "Ingress", "ajuste")
    assert ingress["spec"]["ingressClassName"] == "traefik"
    assert [rule["host"] for rule in ingress["spec"]["rules"]] == [HOST]
    assert ingress["spec"]["tls"] == [{"hosts": [HOST], "secretName": "ajuste-tls"}]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert_reaches_web(objects, backend["name"], backend["port"]["name"])


def assert_reaches_web(objects: list[Obj], service_name: str, port: str | int) -> None:
    service = find(objects, "Service", service_name)
    [service_port] = [p for p in service["spec"]["ports"] if port in (p["name"], p["port"])]
    web = find(objects, "Deployment", "ajuste-web")
    assert (
        service["spec"]["selector"].items() <= web["spec"]["template"]["metadata"]["labels"].items()
    )
    container_ports = {p["name"] for p in pod_of(objects, "ajuste-web")["containers"][0]["ports"]}
    assert service_port["targetPort"] in container_ports


def test_gateway_api_route(tmp_path: Path) -> None:
    objects = render(tmp_path, "gateway-api")
    route = find(objects, "HTTPRoute", "ajuste")
    assert route["spec"]["hostnames"] == [HOST]
    assert "Ingress" not in {o["kind"] for o in objects}
    backend = route["spec"]["rules"][0]["backendRefs"][0]
    assert_reaches_web(objects, backend["name"], backend["port"])


# gateway.networking.k8s.io/v1 HTTPRoute (Gateway API v1.2.1, standard channel: rules have no
# `name`, `retry` or `sessionPersistence` there, and `timeouts` is standard only from v1.2):
# the fields each object may have, and a pattern or type per leaf the component uses.
HTTPROUTE_FIELDS: dict[str, set[str]] = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"parentRefs", "hostnames", "rules"},
    "spec.parentRefs[]": {"group", "kind", "namespace", "name", "sectionName", "port"},
    "spec.rules[]": {"matches", "filters", "backendRefs", "timeouts"},
    "spec.rules[].matches[]": {"path", "headers", "queryParams", "method"},
    "spec.rules[].matches[].path": {"type", "value"},
    "spec.rules[].backendRefs[]": {
        "group",
        "kind",
        "name",
        "namespace",
        "port",
        "weight",
        "filters",
    },
    "spec.rules[].timeouts": {"request", "backendRequest"},
}
HOSTNAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")


def check_httproute(route: Obj) -> None:
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": route["metadata"]})
    check_fields(route, "")
    spec = route["spec"]
    assert 1 <= len(spec["parentRefs"]) <= 32 and all(p["name"] for p in spec["parentRefs"])
    assert all(HOSTNAME.match(h) and len(h) <= 253 for h in spec["hostnames"])
    for rule in spec["rules"]:
        for match in rule["matches"]:
            assert match["path"]["type"] in ("Exact", "PathPrefix", "RegularExpression")
            assert match["path"]["value"].startswith("/")
        for backend in rule["backendRefs"]:
            assert isinstance(backend["port"], int) and 1 <= backend["port"] <= 65535
        assert all(DURATION.match(v) for v in rule.get("timeouts", {}).values())


def check_fields(value: Any, path: str, fields: dict[str, set[str]] = HTTPROUTE_FIELDS) -> None:
    if isinstance(value, list):
        for item in value:
            check_fields(item, path + "[]", fields)
    elif isinstance(value, dict) and path in fields:
        unknown = set(value) - fields[path]
        assert not unknown, f"{path or 'the object'}: unknown fields {unknown}"
        for key, item in value.items():
            check_fields(item, f"{path}.{key}" if path else key, fields)


def test_the_route_needs_gateway_api_1_2_and_the_docs_say_so(tmp_path: Path) -> None:
    route = find(render(tmp_path, "gateway-api"), "HTTPRoute", "ajuste")
    assert route["spec"]["rules"][0]["timeouts"] == {"request": "300s"}
    kustomization = (K8S / "components" / "gateway-api" / "kustomization.yaml").read_text()
    docs = (K8S.parent / "docs" / "deploy-kubernetes.md").read_text()
    for text in (kustomization, docs):
        assert "v1.2" in text and "standard channel" in text


# monitoring.coreos.com/v1 ServiceMonitor (Prometheus Operator): the fields the component uses.
SERVICE_MONITOR_FIELDS: dict[str, set[str]] = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"selector", "endpoints", "namespaceSelector", "jobLabel"},
    "spec.selector": {"matchLabels", "matchExpressions"},
    "spec.endpoints[]": {
        "port",
        "path",
        "scheme",
        "interval",
        "scrapeTimeout",
        "authorization",
        "relabelings",
        "metricRelabelings",
    },
    "spec.endpoints[].authorization": {"type", "credentials"},
    "spec.endpoints[].authorization.credentials": {"name", "key", "optional"},
}


def check_service_monitor(monitor: Obj, objects: list[Obj]) -> None:
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": monitor["metadata"]})
    check_fields(monitor, "", SERVICE_MONITOR_FIELDS)
    for endpoint in monitor["spec"]["endpoints"]:
        assert all(DURATION.match(endpoint[k]) for k in ("interval", "scrapeTimeout"))
        assert endpoint["path"].startswith("/") and endpoint["scheme"] in ("http", "https")
        assert endpoint["authorization"]["type"] == "Bearer"


def test_service_monitor_scrapes_the_web_pods_with_the_metrics_token(tmp_path: Path) -> None:
    objects = render(tmp_path, "service-monitor")
    monitor = find(objects, "ServiceMonitor", "ajuste")
    service = find(objects, "Service", "ajuste-web")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    credentials = endpoint["authorization"]["credentials"]
    # The token Prometheus sends is the file the panel checks it against.
    assert credentials["name"] == "ajuste-secrets"
    token_file = config(objects)["METRICS_TOKEN_FILE"]
    assert token_file == f"/etc/ajuste/secrets/{credentials['key']}"
    template = (K8S / "secret.example.yaml").read_text()
    assert f"# {credentials['key']}: " in template


def test_namespaced_mode_reads_nothing_cluster_wide_but_namespaces_and_nodes(
    tmp_path: Path,
) -> None:
    objects = render(tmp_path, "namespaced")
    assert config(objects)["KUBERNETES_NAMESPACED"] == "1"
    controller = find(objects, "ClusterRole", "ajuste-controller")
    read = {r for rule in controller["rules"] for r in rule["resources"] if "list" in rule["verbs"]}
    assert read == {"namespaces", "nodes"}
    project = find(objects, "ClusterRole", "ajuste-project")
    pods = next(rule for rule in project["rules"] if rule["resources"] == ["pods"])
    assert {"list", "watch"} <= set(pods["verbs"])


# The database connections each process can hold at once: a gunicorn thread, a Celery prefork
# child and a watcher thread each keep one. The watcher: its main thread and the log collector's
# loop, plus its LOG_WRITERS writer threads (controlpanel/engine/logwriters.py; a followed log's
# thread holds none). Beat: one, at most.
WATCHER_THREADS = 2
BEAT_CONNECTIONS = 1


def connections(objects: list[Obj]) -> dict[str, int]:
    """Per Deployment: replicas x what each pod's processes hold."""
    counts = {}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        name = deployment["metadata"]["name"]
        per_pod = 0
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            command = container["command"]
            if command[0] == "gunicorn":
                per_pod += int(_flag(command, "--workers")) * int(_flag(command, "--threads"))
            elif command[0] == "uvicorn":  # an open stream holds none; reads take turns
                per_pod += int(config(objects)["STREAMS_READ_THREADS"])
            elif "worker" in command:
                per_pod += int(_flag(command, "--concurrency"))
        watcher = WATCHER_THREADS + int(config(objects)["LOG_WRITERS"])
        per_pod = {"ajuste-watcher": watcher, "ajuste-beat": BEAT_CONNECTIONS}.get(name, per_pod)
        counts[name] = deployment["spec"]["replicas"] * per_pod
    return counts


def _flag(command: list[str], flag: str) -> str:
    for i, part in enumerate(command):
        if part == flag:
            return command[i + 1]
        if part.startswith(flag + "="):
            return part.split("=", 1)[1]
    raise AssertionError(f"{flag} not in {command}")


@pytest.mark.parametrize(("components", "total"), [([], 83), (["large"], 113)])
def test_connection_sizing_counts_every_process(
    tmp_path: Path, components: list[str], total: int
) -> None:
    """The docs' figures are the manifests' own: the default stays under PostgreSQL's
    default max_connections (100, 3 kept for superusers); the large component does not,
    and turns persistent connections off and says so."""
    objects = render(tmp_path, *components)
    counts = connections(objects)
    assert sum(counts.values()) == total
    docs = (K8S.parent / "docs" / "deploy-kubernetes.md").read_text()
    assert f"= **{total}**" in docs
    if total > 97:
        assert config(objects)["DATABASE_CONN_MAX_AGE"] == "0"


def test_large_sizes_web_and_workers_and_drops_persistent_connections(tmp_path: Path) -> None:
    objects = render(tmp_path, "large")
    assert find(objects, "Deployment", "ajuste-web")["spec"]["replicas"] == 3
    assert find(objects, "Deployment", "ajuste-worker")["spec"]["replicas"] == 3
    assert config(objects)["DATABASE_CONN_MAX_AGE"] == "0"


@pytest.mark.parametrize("name", ["pdb", "topology-spread"])
def test_selectors_select_the_pods(tmp_path: Path, name: str) -> None:
    objects = render(tmp_path, name)
    selectors = [
        (o["metadata"]["name"], o["spec"]["selector"]["matchLabels"])
        for o in objects
        if o["kind"] == "PodDisruptionBudget"
    ] + [
        (o["metadata"]["name"], c["labelSelector"]["matchLabels"])
        for o in objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
    ]
    assert {n for n, _ in selectors} == {"ajuste-web", "ajuste-events", "ajuste-worker"}
    for deployment, labels in selectors:
        pod = find(objects, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        assert labels.items() <= pod.items()


def test_every_content_host_reaches_the_gateway_by_any_route(tmp_path: Path) -> None:
    """*.USER_CONTENT_DOMAIN, from the ConfigMap, to the gateway's Service: an Ingress with no
    controller-specific annotation, or an HTTPRoute; the wildcard certificate for TLS."""
    objects = render(tmp_path, "tls")
    ingress = find(objects, "Ingress", "ajuste-usercontent")
    assert [rule["host"] for rule in ingress["spec"]["rules"]] == [f"*.{CONTENT}"]
    assert not ingress["metadata"].get("annotations")
    assert ingress["spec"]["tls"] == [
        {"hosts": [f"*.{CONTENT}"], "secretName": "ajuste-usercontent-tls"}
    ]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert_reaches_gateway(objects, backend["name"], backend["port"]["name"])
    (tmp_path / "route").mkdir()
    routed = render(tmp_path / "route", "gateway-api")
    route = find(routed, "HTTPRoute", "ajuste-usercontent")
    assert route["spec"]["hostnames"] == [f"*.{CONTENT}"]
    backend = route["spec"]["rules"][0]["backendRefs"][0]
    assert_reaches_gateway(routed, backend["name"], backend["port"])


def assert_reaches_gateway(objects: list[Obj], service_name: str, port: str | int) -> None:
    service = find(objects, "Service", service_name)
    [service_port] = [p for p in service["spec"]["ports"] if port in (p["name"], p["port"])]
    gateway = find(objects, "Deployment", "ajuste-gateway")
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container = pod_of(objects, "ajuste-gateway")["containers"][0]
    assert service_port["targetPort"] in {p["name"] for p in container["ports"]}


def test_the_gateway_asks_the_panel_at_its_internal_address(tmp_path: Path) -> None:
    """The gateway's pods carry this release's image, no token and no secret, on a read-only
    root; they ask the web Service of their own namespace, as KUBERNETES_PANEL_URL names it,
    and the project policies' gateway peer selects them."""
    from deploy.manifests.projects import GATEWAY_LABELS
    from deploy.version import VERSION

    objects = render(tmp_path, "usercontent-gateway", namespace="tools")
    pod = pod_of(objects, "ajuste-gateway")
    [container] = pod["containers"]
    assert container["image"] == f"ghcr.io/ajuste/gateway:{VERSION}"
    assert pod["automountServiceAccountToken"] is False and "volumes" in pod
    assert not [v for v in pod["volumes"] if "secret" in v]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in container["env"]}
    assert (
        env["AJUSTE_PANEL_URL"]["value"] == "http://ajuste-web.$(POD_NAMESPACE).svc.cluster.local"
    )
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    labels = find(objects, "Deployment", "ajuste-gateway")["spec"]["template"]["metadata"]
    assert GATEWAY_LABELS.items() <= labels["labels"].items()
    service = find(objects, "Service", "ajuste-web")
    assert service["metadata"]["namespace"] == "tools"


def test_network_policy_lets_the_ingress_controller_reach_the_web_port(tmp_path: Path) -> None:
    objects = render(tmp_path, "network-policy", "postgres", "redis")
    web = find(objects, "NetworkPolicy", "ajuste-web")
    [rule] = web["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [8000]
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}
    } in rule["from"]
    container = pod_of(objects, "ajuste-web")["containers"][0]
    assert container["ports"][0]["containerPort"] == 8000
    events = find(objects, "NetworkPolicy", "ajuste-events")
    assert events["spec"]["ingress"][0]["from"] == rule["from"]
    [events_port] = events["spec"]["ingress"][0]["ports"]
    assert (
        events_port["port"]
        == pod_of(objects, "ajuste-events")["containers"][0]["ports"][0]["containerPort"]
    )
    labels = find(objects, "Deployment", "ajuste-events")["spec"]["template"]["metadata"]
    assert events["spec"]["podSelector"]["matchLabels"].items() <= labels["labels"].items()
    stores = find(objects, "NetworkPolicy", "ajuste-datastores")
    [expression] = stores["spec"]["podSelector"]["matchExpressions"]
    for name in ("ajuste-postgres", "ajuste-redis"):
        labels = find(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] in expression["values"]


@pytest.mark.parametrize(
    ("name", "key"), [("postgres", "POSTGRES_PASSWORD"), ("redis", "REDIS_PASSWORD")]
)
def test_bundled_datastores_keep_their_data_and_read_their_password_from_the_secret(
    tmp_path: Path, name: str, key: str
) -> None:
    objects = render(tmp_path, name)
    stateful = find(objects, "StatefulSet", f"ajuste-{name}")
    assert stateful["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    [claim] = stateful["spec"]["volumeClaimTemplates"]
    pod = stateful["spec"]["template"]["spec"]
    mounts = {m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert claim["metadata"]["name"] in mounts
    secret = next(v["secret"] for v in pod["volumes"] if "secret" in v)
    assert secret["secretName"] == "ajuste-secrets" and secret["items"] == [
        {"key": key, "path": key}
    ]
    env = pod["containers"][0].get("env", [])
    assert key not in {e["name"] for e in env}  # a file, never a value in the pod spec
    service = find(objects, "Service", f"ajuste-{name}")
    assert (
        service["spec"]["selector"].items()
        <= stateful["spec"]["template"]["metadata"]["labels"].items()
    )


# What the stream routes must send to the events pods, and what they must leave to the web's.
STREAM_PATHS = [
    "/p/vision/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/events/",
    "/p/a_b-2/notebooks/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/events/",
    "/p/vision/events/",
    "/dashboard/events/",
    "/api/v1/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/logs/stream/",
    "/api/v1/apps/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/logs/stream/",
]
PAGE_PATHS = [
    "/p/vision/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/",
    "/p/vision/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/logs/",
    "/p/vision/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/events/x",
    "/p/vision/events/x",
    "/p/vision/jobs/events/",
    "/p/vision/dashboard/",
    "/dashboard/",
    "/dashboard/capacity/",
    "/dashboard/events/x",
    "/p/vision/dashboard/events/",
    "/api/v1/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/logs/",
    "/api/v1/jobs/0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20/logs/stream/extra/",
    "/",
]


def assert_routes_the_streams(patterns: list[str]) -> None:
    """The routes' patterns take exactly the paths the events server streams
    (controlpanel/streams/asgi.py), nothing of the pages or the rest of the API."""
    from controlpanel.streams.asgi import API, PAGE, PROJECT, SITE

    def routed(path: str) -> bool:  # ingress-nginx anchors at ^, gateways match the whole path
        return any(re.fullmatch(p.removeprefix("^").removesuffix("$"), path) for p in patterns)

    for path in STREAM_PATHS:
        served = PAGE.match(path) or API.match(path) or PROJECT.match(path) or SITE.match(path)
        assert routed(path) and served, path
    for path in PAGE_PATHS:
        served = PAGE.match(path) or API.match(path) or PROJECT.match(path) or SITE.match(path)
        assert not routed(path) and not served, path


def assert_reaches_events(objects: list[Obj], service_name: str, port: str | int) -> None:
    service = find(objects, "Service", service_name)
    [service_port] = [p for p in service["spec"]["ports"] if port in (p["name"], p["port"])]
    events = find(objects, "Deployment", "ajuste-events")
    labels = events["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container = pod_of(objects, "ajuste-events")["containers"][0]
    assert service_port["targetPort"] in {p["name"] for p in container["ports"]}


def test_the_ingress_sends_the_streams_to_the_events_pods_unbuffered(tmp_path: Path) -> None:
    """On the panel's host, the stream paths to ajuste-events with buffering off and reads far
    longer than the heartbeat; pages then open their streams at SITE_URL."""
    from django.conf import settings

    objects = render(tmp_path, "tls")
    ingress = find(objects, "Ingress", "ajuste-events")
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == HOST
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert annotations["nginx.ingress.kubernetes.io/use-regex"] == "true"
    assert annotations["nginx.ingress.kubernetes.io/proxy-http-version"] == "1.1"
    read = int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"])
    assert read >= 4 * settings.STREAMS_HEARTBEAT_SECONDS
    paths = rule["http"]["paths"]
    assert {p["pathType"] for p in paths} == {"ImplementationSpecific"}
    assert_routes_the_streams([p["path"] for p in paths])
    for path in paths:
        backend = path["backend"]["service"]
        assert_reaches_events(objects, backend["name"], backend["port"]["name"])
    assert (
        ingress["spec"]["ingressClassName"]
        == find(objects, "Ingress", "ajuste")["spec"]["ingressClassName"]
    )
    assert config(objects)["STREAMS_URL"] == f"https://{HOST}"


def test_the_gateway_route_sends_the_streams_to_the_events_pods_untimed(tmp_path: Path) -> None:
    objects = render(tmp_path, "gateway-api")
    route = find(objects, "HTTPRoute", "ajuste")
    [streams] = [
        rule
        for rule in route["spec"]["rules"]
        if {b["name"] for b in rule["backendRefs"]} == {"ajuste-events"}
    ]
    assert {m["path"]["type"] for m in streams["matches"]} == {"RegularExpression"}
    assert_routes_the_streams([m["path"]["value"] for m in streams["matches"]])
    assert streams["timeouts"] == {"request": "0s"}
    for backend in streams["backendRefs"]:
        assert_reaches_events(objects, backend["name"], backend["port"])
    assert config(objects)["STREAMS_URL"] == f"https://{HOST}"
