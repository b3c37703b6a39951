"""k8s/ (Ajuste itself on a cluster) renders with kustomize (`kubectl kustomize`, the real one:
components, patches and replacements) and validates strictly against the oldest Kubernetes it
supports and the newest whose schemas kubernetes-validate ships, alone and with every component;
its RBAC grants exactly what the Kubernetes backend does: every API call of a full scenario is
allowed, every grant is used (leader election's Leases included, and in the namespaced mode
with its component)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deploy import images, names
from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.apply import apply
from deploy.kubernetes.lease import SWEEP_LEASE, LeaseLock
from deploy.manifests import (
    make_job,
    make_notebook_service,
    make_project_objects,
    make_workspace_claim,
)
from deploy.manifests.jobs import PUSH_BACKOFF_LIMIT
from deploy.manifests.jobset import make_jobset
from deploy.types import EgressRule, JobRequest, NotebookRequest, Phase, ProjectRequest, Scaling
from deploy.version import VERSION
from storage.datastore import DatastoreConfig
from tests.deploy.kueue_objects import need_schemas
from tests.deploy.test_app_manifests import make_app_request
from tests.fixtures.k8s_emulator import EmulatedCluster, crds
from tests.fixtures.k8s_emulator.store import RESOURCES

K8S = Path(__file__).resolve().parents[2] / "k8s"
COMPONENTS = sorted(p.name for p in (K8S / "components").iterdir() if p.is_dir())
NS = "ajuste-vision"
PANEL_NS = "ajuste"
# The ValidatingAdmissionPolicy is GA from 1.30; the newest schemas kubernetes-validate ships.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
# Granted but never an API request of the backend: RBAC checks `bind` when a RoleBinding is
# created (escalation prevention).
NOT_A_REQUEST = {("cluster", "clusterroles", "bind")}
PANEL_IMAGE = f"ghcr.io/ajuste/ajuste:{VERSION}"
Obj = dict[str, Any]


def kustomize(directory: Path) -> list[Obj]:
    """`kubectl kustomize DIRECTORY`, parsed."""
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def overlay(tmp_path: Path, *, components: list[str] = (), **fields: Any) -> list[Obj]:
    """An operator's overlay on k8s/ (in a temporary directory), rendered."""
    base = os.path.relpath(K8S, tmp_path)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "components": [f"{base}/components/{name}" for name in components],
        **fields,
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(tmp_path)


def validate(manifest: Obj) -> None:
    """Strict (unknown fields fail) against every supported version."""
    for version in VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


# A generated ConfigMap's name: its own, then a hash of its content.
GENERATED = re.compile(r"^(?P<name>.+)-[a-z0-9]{10}$")


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    """The object of that kind and name; a generated ConfigMap by the name it was given."""
    return next(o for o in objects if o["kind"] == kind and given_name(o) == name)


def given_name(obj: Obj) -> str:
    name = str(obj["metadata"]["name"])
    found = GENERATED.match(name) if obj["kind"] == "ConfigMap" else None
    return found.group("name") if found else name


def config(objects: list[Obj]) -> dict[str, str]:
    """The settings the pods read (the generated ConfigMap `ajuste-config`)."""
    data: dict[str, str] = find(objects, "ConfigMap", "ajuste-config")["data"]
    return data


def pod_of(objects: list[Obj], name: str) -> Obj:
    return find(objects, "Deployment", name)["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return kustomize(K8S)


def test_renders_every_part_and_validates(objects: list[Obj]) -> None:
    for manifest in objects:
        validate(manifest)
    assert sorted((o["kind"], given_name(o)) for o in objects) == [
        ("ClusterRole", "ajuste-controller"),
        ("ClusterRole", "ajuste-project"),
        ("ClusterRoleBinding", "ajuste-controller"),
        ("ConfigMap", "ajuste-config"),
        ("Deployment", "ajuste-beat"),
        ("Deployment", "ajuste-events"),
        ("Deployment", "ajuste-watcher"),
        ("Deployment", "ajuste-web"),
        ("Deployment", "ajuste-worker"),
        ("Role", "ajuste-leader-election"),
        ("RoleBinding", "ajuste-leader-election"),
        ("Service", "ajuste-events"),
        ("Service", "ajuste-web"),
        ("ServiceAccount", "ajuste-beat"),
        ("ServiceAccount", "ajuste-controller"),
        ("ServiceAccount", "ajuste-web"),
        ("ValidatingAdmissionPolicy", "ajuste-controller-scope"),
        ("ValidatingAdmissionPolicyBinding", "ajuste-controller-scope"),
    ]
    cluster_wide = ("Cluster", "Namespace", "ValidatingAdmissionPolicy")
    namespaced = [o for o in objects if not o["kind"].startswith(cluster_wide)]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"ajuste"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ajuste" for o in objects)


def test_the_images_are_this_release(objects: list[Obj]) -> None:
    settings = config(objects)
    assert settings["AJUSTE_SYNC_IMAGE"] == PANEL_IMAGE
    assert settings["AJUSTE_FINETUNE_IMAGE"] == f"ghcr.io/ajuste/finetune:{VERSION}"
    assert settings["AJUSTE_SERVING_IMAGE"] == f"ghcr.io/ajuste/serving:{VERSION}"
    # Every movable image is there, as the code's default: the base moves nothing.
    assert {name: settings[name] for name in images.MOVABLE} == images.MOVABLE
    assert images.moved_images(settings) == {}


def test_the_editors_default_images_are_movable() -> None:
    """The notebook images a new install offers are the ones an overlay can move."""
    from controlpanel.notebooks.defaults import DEFAULT_IMAGES

    assert {image for _, _, image, _ in DEFAULT_IMAGES} <= set(images.MOVABLE.values())


def test_the_namespace_is_not_part_of_the_kustomization(objects: list[Obj]) -> None:
    """`kubectl delete -k` or a GitOps prune would delete it and everything in it, the bundled
    PostgreSQL's volume included: it is applied once, by hand, from namespace.yaml."""
    assert "Namespace" not in {o["kind"] for o in objects}
    namespace = yaml.safe_load((K8S / "namespace.yaml").read_text())
    validate(namespace)
    assert namespace["metadata"]["name"] == "ajuste"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert (
        "namespace.yaml"
        not in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    )


def test_a_configuration_change_rolls_the_pods_that_read_it(tmp_path: Path) -> None:
    """The ConfigMap's name carries a hash of its content and every pod template names it:
    an overlay's change (here LOG_LEVEL) is a new pod template for each Deployment."""
    templates = {}
    for level in ("INFO", "DEBUG"):
        directory = tmp_path / level
        directory.mkdir()
        rendered = overlay(
            directory,
            configMapGenerator=[
                {
                    "name": "ajuste-config",
                    "namespace": "ajuste",
                    "behavior": "merge",
                    "literals": [f"LOG_LEVEL={level}"],
                }
            ],
        )
        name = find(rendered, "ConfigMap", "ajuste-config")["metadata"]["name"]
        assert config(rendered)["LOG_LEVEL"] == level
        deployments = [o for o in rendered if o["kind"] == "Deployment"]
        assert len(deployments) == 5
        for deployment in deployments:
            pod = deployment["spec"]["template"]["spec"]
            refs = {
                source["configMapRef"]["name"]
                for container in [*pod.get("initContainers", []), *pod["containers"]]
                for source in container.get("envFrom", [])
            }
            assert refs == {name}, deployment["metadata"]["name"]
        templates[level] = {
            d["metadata"]["name"]: yaml.safe_dump(d["spec"]["template"]) for d in deployments
        }
    assert all(templates["INFO"][name] != templates["DEBUG"][name] for name in templates["INFO"])


def test_the_secret_template_validates_and_is_not_applied(objects: list[Obj]) -> None:
    template = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    validate(template)
    assert "Secret" not in {o["kind"] for o in objects}
    # Every file the settings read from the Secret is one of its keys.
    files = {
        value.rsplit("/", 1)[1]
        for key, value in find(objects, "ConfigMap", "ajuste-config")["data"].items()
        if key.endswith("_FILE")
    }
    assert files <= set(template["stringData"]), files - set(template["stringData"])


def test_pods_are_restricted_probed_and_sized(objects: list[Obj]) -> None:
    for workload in (o for o in objects if o["kind"] == "Deployment"):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert container["image"] == PANEL_IMAGE
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert set(container["resources"]) == {"requests", "limits"}
        assert all("livenessProbe" in c for c in pod["containers"])
    for name in ("ajuste-web", "ajuste-events"):
        container = pod_of(objects, name)["containers"][0]
        # No Host header: the probes are answered before the ALLOWED_HOSTS check.
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


def test_the_events_pods_serve_the_streams_with_the_webs_settings(objects: list[Obj]) -> None:
    """uvicorn on controlpanel.asgi (the Procfile's `events`) with the web's image, ConfigMap
    and secrets, behind a Service of its own; with no route to it (k8s/ alone) pages poll."""
    web, events = pod_of(objects, "ajuste-web"), pod_of(objects, "ajuste-events")
    [container] = events["containers"]
    assert container["image"] == web["containers"][0]["image"]
    assert container["envFrom"] == web["containers"][0]["envFrom"]
    secrets = [v for v in events["volumes"] if "secret" in v]
    assert secrets == [v for v in web["volumes"] if "secret" in v]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    command = container["command"]
    assert command[:2] == ["uvicorn", "controlpanel.asgi:application"]
    port = command[command.index("--port") + 1]
    [container_port] = container["ports"]
    assert container_port == {"name": "http", "containerPort": int(port), "protocol": "TCP"}
    assert command[command.index("--host") + 1] == "0.0.0.0"  # noqa: S104 (the pod's address)
    service = find(objects, "Service", "ajuste-events")
    labels = find(objects, "Deployment", "ajuste-events")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert find(objects, "Deployment", "ajuste-events")["spec"]["replicas"] >= 2
    assert config(objects)["STREAMS_URL"] == ""


def test_migrations_run_before_the_new_pods_serve(objects: list[Obj]) -> None:
    """No migration Job (a quick second upgrade hit "field is immutable", a failed one's log
    vanished with its TTL): the web pods migrate in an init container under an advisory lock,
    a rollout keeps the old pods until a new one is ready, and the other processes wait for the
    schema."""
    assert "Job" not in {o["kind"] for o in objects}
    web = find(objects, "Deployment", "ajuste-web")
    assert web["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    [migrate] = web["spec"]["template"]["spec"]["initContainers"]
    assert migrate["command"] == ["python", "manage.py", "migrate_locked"]
    for name in ("ajuste-worker", "ajuste-beat", "ajuste-watcher"):
        [wait] = pod_of(objects, name)["initContainers"]
        assert wait["command"] == ["python", "manage.py", "wait_for_migrations"]


def test_a_failed_migration_leaves_every_old_pod_working(objects: list[Obj]) -> None:
    """Every Deployment starts its new pods before it stops an old one: a new pod that never
    gets past its init container (a failed migration) leaves the old ones running, beat and
    the watcher included (a Recreate strategy stopped them first)."""
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        strategy = deployment["spec"].get("strategy", {})
        rolling = strategy.get("rollingUpdate", {})
        assert strategy.get("type", "RollingUpdate") == "RollingUpdate", deployment
        assert rolling.get("maxUnavailable", "25%") in (0, "25%"), deployment
        if deployment["spec"]["replicas"] == 1:
            assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] == 1


def test_the_panel_knows_its_namespace_from_its_pod(tmp_path: Path) -> None:
    objects = overlay(tmp_path, namespace="tools")
    assert "KUBERNETES_NAMESPACE" not in config(objects)
    for name in ("ajuste-web", "ajuste-events", "ajuste-worker", "ajuste-watcher"):
        env = {e["name"]: e for e in pod_of(objects, name)["containers"][0]["env"]}
        assert env["KUBERNETES_NAMESPACE"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "metadata.namespace"}
        }
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = find(
            objects, kind, "ajuste-controller" if kind[0] == "C" else "ajuste-leader-election"
        )
        assert binding["subjects"][0]["namespace"] == "tools"
    assert find(objects, "Role", "ajuste-leader-election")["metadata"]["namespace"] == "tools"
    # What the cluster calls back (the user-content gateway's questions) follows the namespace.
    derived = panel_settings(
        config(objects) | {"KUBERNETES_NAMESPACE": "tools"}, "KUBERNETES_PANEL_URL"
    )
    assert derived == ["http://ajuste-web.tools.svc.cluster.local"]


def panel_settings(env: dict[str, str], *names: str) -> list[str]:
    """The panel's settings as its pods would read them from `env` (its secrets aside)."""
    env = {k: v for k, v in env.items() if not k.endswith("_FILE")} | {
        "DEBUG": "1",
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "controlpanel.settings",
        "S3_ACCESS_KEY": "from-the-secret",
        "S3_SECRET_KEY": "from-the-secret",
    }
    code = "from django.conf import settings as s; print(*(getattr(s, n) for n in %r), sep='\\n')"
    result = subprocess.run(
        [sys.executable, "-c", code % (names,)],
        cwd=K8S.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_an_image_override_moves_the_job_containers_too(tmp_path: Path) -> None:
    """Job pods' sync containers run the panel image (AJUSTE_SYNC_IMAGE): an overlay's
    `images:` entry moves them with the panel's own containers, and the fine-tune image too."""
    objects = overlay(
        tmp_path,
        images=[
            {"name": "ghcr.io/ajuste/ajuste", "newName": "registry.corp/ajuste", "newTag": "0.2.0"},
            {"name": "ghcr.io/ajuste/finetune", "digest": "sha256:" + "ab" * 32},
        ],
    )
    settings = config(objects)
    assert settings["AJUSTE_SYNC_IMAGE"] == "registry.corp/ajuste:0.2.0"
    assert settings["AJUSTE_FINETUNE_IMAGE"] == "ghcr.io/ajuste/finetune@sha256:" + "ab" * 32
    images = {
        c["image"]
        for o in objects
        if o["kind"] == "Deployment"
        for c in [
            *o["spec"]["template"]["spec"].get("initContainers", []),
            *o["spec"]["template"]["spec"]["containers"],
        ]
    }
    assert images == {"registry.corp/ajuste:0.2.0"}


@pytest.mark.k8s
def test_an_overlay_moves_the_serving_and_editor_images(
    tmp_path: Path, k8s_cluster: EmulatedCluster, notebook_request: NotebookRequest
) -> None:
    """The overlay's `images:` entries reach the workloads: an app on the default serving
    image and a notebook on a default editor image run the mirror's (the settings read the
    ConfigMap the overlay rendered, the backend moves what asks for a default)."""
    objects = overlay(
        tmp_path,
        images=[
            {"name": "ghcr.io/ajuste/serving", "newName": "registry.corp/serving"},
            {"name": "quay.io/jupyter/pytorch-notebook", "newName": "registry.corp/pytorch"},
        ],
    )
    moved = images.moved_images(config(objects))
    assert moved == {
        images.SERVING_IMAGE: f"registry.corp/serving:{VERSION}",
        images.MOVABLE["AJUSTE_JUPYTER_PYTORCH_IMAGE"]: "registry.corp/pytorch:cuda12-python-3.12",
    }
    client = k8s_cluster.api_client()
    backend = KubernetesBackend(api_client=client, images=moved)
    k8s_cluster.create_namespace(NS)
    backend.apply_app(app=make_app_request(image=images.SERVING_IMAGE))
    notebook = replace(notebook_request, image=images.MOVABLE["AJUSTE_JUPYTER_PYTORCH_IMAGE"])
    backend.apply_notebook(notebook=notebook)
    backend.apply_app(app=replace(make_app_request(id="own"), image="registry.corp/mine:1"))
    client.close()
    containers = {
        name: k8s_cluster.get(plural, NS, name)["spec"]["template"]["spec"]["containers"][0]
        for plural, name in (
            ("deployments", "app-5f0c"),
            ("statefulsets", "nb-7"),
            ("deployments", "app-own"),
        )
    }
    assert {name: c["image"] for name, c in containers.items()} == {
        "app-5f0c": f"registry.corp/serving:{VERSION}",
        "nb-7": "registry.corp/pytorch:cuda12-python-3.12",
        "app-own": "registry.corp/mine:1",  # not a default: run as asked
    }


def test_the_kustomization_tags_this_release() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert {i["name"]: i["newTag"] for i in kustomization["images"]} == {
        "ghcr.io/ajuste/ajuste": VERSION,
        "ghcr.io/ajuste/finetune": VERSION,
        "ghcr.io/ajuste/serving": VERSION,
    }


def test_only_the_processes_that_call_the_cluster_get_a_token(objects: list[Obj]) -> None:
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] == "Deployment"
    }
    assert {
        name for name, pod in pods.items() if pod.get("automountServiceAccountToken", True)
    } == {"ajuste-worker", "ajuste-watcher", "ajuste-beat"}
    assert {name: pod.get("serviceAccountName") for name, pod in pods.items()} == {
        "ajuste-web": "ajuste-web",
        "ajuste-events": "ajuste-web",
        "ajuste-worker": "ajuste-controller",
        "ajuste-watcher": "ajuste-controller",
        "ajuste-beat": "ajuste-beat",
    }
    # Beat's token reaches its Lease only (leader election), nothing of the workloads.
    beat_bound = {
        o["roleRef"]["name"]
        for o in objects
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in o.get("subjects") or []
        if subject["name"] == "ajuste-beat"
    }
    assert beat_bound == {"ajuste-leader-election"}
    # The internet-facing web pods have an identity of their own, bound to nothing.
    assert find(objects, "ServiceAccount", "ajuste-web")["automountServiceAccountToken"] is False
    subjects = [
        subject["name"]
        for o in objects
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in o.get("subjects") or []
    ]
    assert "ajuste-web" not in subjects and "ajuste-controller" in subjects


def test_rbac_has_no_wildcard_no_exec_no_cluster_wide_secrets(objects: list[Obj]) -> None:
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    for role in roles.values():
        for rule in role["rules"]:
            words = [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
            assert "*" not in words
            assert not {"pods/exec", "pods/attach", "pods/portforward"} & set(rule["resources"])
            assert not {"escalate", "impersonate"} & set(rule["verbs"])
    cluster_wide = {r for rule in roles["ajuste-controller"]["rules"] for r in rule["resources"]}
    assert "secrets" not in cluster_wide
    bind = next(r for r in roles["ajuste-controller"]["rules"] if "bind" in r["verbs"])
    assert bind["resourceNames"] == ["ajuste-project"]


def granted(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(scope, resource, verb): `cluster` grants hold everywhere, `namespace` ones in projects,
    `panel` ones (Roles) in the panel's own namespace."""
    scope = {"ajuste-controller": "cluster", "ajuste-project": "namespace"}
    return {
        (scope[role["metadata"]["name"]] if role["kind"] == "ClusterRole" else "panel", r, verb)
        for role in objects
        if role["kind"] in ("ClusterRole", "Role")
        for rule in role["rules"]
        for r in rule["resources"]
        for verb in rule["verbs"]
    }


def used(cluster: EmulatedCluster) -> set[tuple[str, str, str]]:
    """What the recorded requests needed, as RBAC sees them."""
    needs = set()
    for request in cluster.requests():
        parts = request.url.path.strip("/").split("/")
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        scope = "namespace" if rest[0] == "namespaces" and len(rest) > 2 else "cluster"
        if scope == "namespace" and rest[1] == PANEL_NS:
            scope = "panel"
        rest = rest[2:] if scope != "cluster" else rest
        resource = "/".join([rest[0], *rest[2:3]])
        named = len(rest) > 1
        verb = {
            "POST": "create",
            "PATCH": "patch",
            "DELETE": "delete",
            "GET": "get" if named else ("watch" if request.params.get("watch") else "list"),
        }[str(request.method.value)]
        needs.add((scope, resource, verb))
    return needs


def allowed(need: tuple[str, str, str], grants: set[tuple[str, str, str]]) -> bool:
    scope, resource, verb = need
    return ("cluster", resource, verb) in grants or (
        scope != "cluster" and (scope, resource, verb) in grants
    )


@pytest.mark.k8s
def test_rbac_grants_exactly_what_the_backend_does(
    objects: list[dict[str, Any]],
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    project_request: ProjectRequest,
    job_request: JobRequest,
    notebook_request: NotebookRequest,
) -> None:
    for _ in full_scenario(
        k8s_cluster, k8s_backend, project_request, job_request, notebook_request
    ):
        pass
    assert_exact(granted(objects), used(k8s_cluster))


def assert_exact(grants: set[tuple[str, str, str]], needs: set[tuple[str, str, str]]) -> None:
    """Nothing the scenario did was refused; nothing granted went unused."""
    assert {need for need in needs if not allowed(need, grants)} == set()
    unused = {g for g in grants if not any(allowed(n, {g}) for n in needs)} - NOT_A_REQUEST
    assert unused == set()
    assert {resource for _, resource, _ in needs} <= {*RESOURCES, "pods/log", "jobsets"}


@pytest.mark.k8s
def test_rbac_of_the_namespaced_mode_grants_exactly_what_it_does(
    tmp_path: Path,
    k8s_cluster: EmulatedCluster,
    project_request: ProjectRequest,
    job_request: JobRequest,
    notebook_request: NotebookRequest,
) -> None:
    """With the `namespaced` component and KUBERNETES_NAMESPACED: no pod, Job, StatefulSet,
    Deployment or ReplicaSet is read cluster-wide; the same scenario (a watcher watching one
    project namespace) needs nothing more and leaves no grant unused."""
    objects = overlay(tmp_path, components=["namespaced"])
    assert config(objects)["KUBERNETES_NAMESPACED"] == "1"
    grants = granted(objects)
    cluster_wide = {resource for scope, resource, _ in grants if scope == "cluster"}
    assert cluster_wide == {"namespaces", "nodes", "rolebindings", "clusterroles"}
    client = k8s_cluster.api_client()
    backend = KubernetesBackend(
        api_client=client, watch_timeout_s=1, namespaced=True, namespaced_poll_s=0.01
    )
    for _ in full_scenario(k8s_cluster, backend, project_request, job_request, notebook_request):
        pass
    stop = threading.Event()
    watched = backend.watch(stop=stop, namespace=NS, resync_s=60)  # a watcher per namespace
    for _ in backend.observe_all(namespace=NS):
        next(watched)  # the list
    backend.apply_notebook(notebook=notebook_request)
    next(watched)  # the watch
    stop.set()
    client.close()
    assert_exact(grants, used(k8s_cluster))


def full_scenario(
    cluster: EmulatedCluster,
    backend: KubernetesBackend,
    project: ProjectRequest,
    job: JobRequest,
    notebook: NotebookRequest,
) -> Iterator[None]:
    """Everything the panel makes the backend do, upgrades and races included."""
    project_steps(cluster, backend, project, notebook)
    lease_steps(cluster, backend)
    yield
    job_steps(cluster, backend, job)
    yield
    notebook_steps(cluster, backend, notebook)
    yield
    app_steps(cluster, backend)
    yield


def lease_steps(cluster: EmulatedCluster, backend: KubernetesBackend) -> None:
    """Leader election in the panel's namespace: two contenders, a renewal, a release."""
    cluster.create_namespace(PANEL_NS)
    leader, follower = (
        LeaseLock(
            backend.api,
            namespace=PANEL_NS,
            name=SWEEP_LEASE,
            identity=name,
            install=backend.install_id,
        )
        for name in ("worker-a", "worker-b")
    )
    assert leader.try_acquire_or_renew() and not follower.try_acquire_or_renew()
    assert leader.try_acquire_or_renew() and leader.release()
    assert follower.try_acquire_or_renew()


def project_steps(
    cluster: EmulatedCluster,
    backend: KubernetesBackend,
    project: ProjectRequest,
    notebook: NotebookRequest,
) -> None:
    # Objects an older Ajuste made (a different spec hash): applying them again patches them.
    stale = {"metadata": {"annotations": {"ajuste.io/spec-hash": "older-release"}}}
    first_two = make_project_objects(
        project=project, service_account="ajuste-controller", service_account_namespace="ajuste"
    )[:2]
    for manifest in first_two:
        plural = "namespaces" if manifest["kind"] == "Namespace" else "rolebindings"
        cluster.store.create(plural, manifest["metadata"].get("namespace"), merge(manifest, stale))
    cluster.store.create("services", NS, merge(make_notebook_service(notebook=notebook), stale))
    cluster.emulator._requests.clear()
    backend.ensure_project(project=project)
    changed = replace(
        project,
        gpu_quota=4,
        default_cpu="1",
        egress=(EgressRule(cidr="198.51.100.0/24"),),
        datastores=(DatastoreConfig("GRA", "https://s3.gra", "gra", "new-key", "new-secret"),),
    )
    backend.ensure_project(project=changed)
    backend.cluster_capacity()  # the admins' capacity view (nodes and pods, cluster-wide)


def job_steps(cluster: EmulatedCluster, backend: KubernetesBackend, job: JobRequest) -> None:
    backend.apply_job(job=job)
    apply(backend.api, make_job(job=job))  # a racing duplicate task: 409, then read
    pod = cluster.pod_of(NS, "job-42-r1")
    cluster.kubelet.unschedulable(NS, pod, "0/3 nodes are available")
    backend.observe_all()
    cluster.kubelet.run(NS, pod)
    cluster.kubelet.log(NS, pod, "hello")
    backend.read_logs(ref=job.ref, cursor=None)
    cluster.kubelet.finish(NS, pod, exit_code=0)
    backend.apply_job(job=job)
    for _ in range(PUSH_BACKOFF_LIMIT + 1):  # the push Job fails after its retries
        cluster.kubelet.finish(NS, cluster.pod_of(NS, "job-42-r1-push-1"), exit_code=1)
        cluster.back_off()
    backend.retry_push(job=job)
    assert cluster.get("jobs", NS, "job-42-r1-push-2") is not None
    backend.delete_job(ref=job.ref)
    # A crashed task left the workspace claim without its Job: the next apply adopts it.
    second = replace(job, id="43")
    orphan = make_workspace_claim(job=second)
    assert orphan is not None
    apply(backend.api, orphan)
    backend.apply_job(job=second)
    cluster.kubelet.run(NS, cluster.pod_of(NS, "job-43-r1"))
    backend.stop_job(job=second)
    # Its one-second deadline passes (the Job controller ends the pod) before the next steps, on
    # the cluster's clock rather than the test's pace: otherwise its 2 GPUs still count in the
    # quota, and whether the app's pod is admitted after it depends on how fast the steps ran.
    cluster.advance(2)
    jobset_steps(cluster, backend, replace(job, id="44", nodes=2, volumes=()))


def jobset_steps(cluster: EmulatedCluster, backend: KubernetesBackend, job: JobRequest) -> None:
    """A job of two nodes (JobSet installed): made, a racing duplicate (409, then read),
    observed, stopped (the JobSet suspended), deleted."""
    need_schemas(crds.JOBSET)
    cluster.install_jobset()
    backend.apply_job(job=job)
    apply(backend.api, make_jobset(job=job))  # a racing duplicate task: 409, then read
    for pod in cluster.pods_of(NS, "job-44-r1-node-0"):
        cluster.kubelet.run(NS, pod["metadata"]["name"])
    assert backend.observe_job(ref=job.ref).phase is Phase.RUNNING
    backend.stop_job(job=job)
    assert backend.observe_job(ref=job.ref).phase is Phase.STOPPED
    backend.delete_job(ref=job.ref)


def notebook_steps(
    cluster: EmulatedCluster, backend: KubernetesBackend, notebook: NotebookRequest
) -> None:
    # An earlier version's Ingress of the notebook (before the user-content gateway): it goes.
    backend_ref = {"service": {"name": "nb-7", "port": {"name": "http"}}}
    path = {"path": "/", "pathType": "Prefix", "backend": backend_ref}
    legacy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "nb-7",
            "namespace": NS,
            "labels": names.workload_labels(notebook.ref, component="notebook"),
        },
        "spec": {"rules": [{"http": {"paths": [path]}}]},
    }
    cluster.create(legacy)
    # As the panel runs it, with its install's id: an object is read (is it ours?) before it goes.
    client = cluster.api_client()
    KubernetesBackend(api_client=client, install_id=notebook.install).apply_notebook(
        notebook=notebook
    )
    client.close()
    assert cluster.get("ingresses", NS, "nb-7") is None
    backend.apply_notebook(notebook=notebook)
    backend.observe_notebook(ref=notebook.ref)
    stop = threading.Event()
    changes = backend.watch(stop=stop, resync_s=60)
    for _ in backend.observe_all():
        next(changes)  # the list
    cluster.kubelet.run(NS, "nb-7-0")
    next(changes)  # the watch
    stop.set()
    backend.apply_notebook(notebook=replace(notebook, running=False, host="nb2.example"))
    backend.delete_notebook(ref=notebook.ref)


def app_steps(cluster: EmulatedCluster, backend: KubernetesBackend) -> None:
    app = make_app_request()
    backend.apply_app(app=app)
    pod = cluster.pods_of_deployment(NS, "app-5f0c")[0]["metadata"]["name"]
    cluster.kubelet.run(NS, pod)
    cluster.kubelet.log(NS, pod, "serving")
    backend.read_logs(ref=app.ref, cursor=None)
    backend.observe_all()
    autoscaled = replace(app, scaling=Scaling(min_replicas=1, max_replicas=4, target_cpu=70))
    backend.apply_app(app=autoscaled)
    backend.apply_app(app=replace(autoscaled, scaling=replace(autoscaled.scaling, max_replicas=6)))
    keda = replace(autoscaled, keda=True)
    backend.apply_app(app=keda)
    backend.apply_app(app=replace(keda, scaling=replace(keda.scaling, target_cpu=60)))
    backend.delete_app(ref=app.ref)


def merge(manifest: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    meta = {**manifest["metadata"]}
    meta["annotations"] = {**meta.get("annotations", {}), **extra["metadata"]["annotations"]}
    return {**manifest, "metadata": meta}
