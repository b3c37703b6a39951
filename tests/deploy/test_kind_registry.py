"""The deploy side's kind registry (issue 24): every kind the panel registers has a deploy spec
and a cluster driver, each spec agrees with what its kind's manifests make, and the shared
deploy code looks kinds up instead of naming them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from controlpanel.kinds import KINDS
from deploy import kinds, manifests, names
from deploy.kubernetes.driver import driver
from deploy.types import AppRequest, JobRequest, NotebookRequest, Scaling, WorkloadKind
from tests.deploy.test_app_manifests import make_app_request

ROOT = Path(__file__).resolve().parents[2]
# The deploy code every kind goes through (backend dispatch, observation after events, the
# sweep, orphans, logs, names, local runs): it may look a kind up, never name one.
SHARED = [
    "deploy/names.py",
    "deploy/kubernetes/backend.py",
    "deploy/kubernetes/sweep.py",
    "deploy/kubernetes/orphans.py",
    "deploy/kubernetes/runlogs.py",
    "deploy/kubernetes/pods.py",
    "deploy/kubernetes/driver.py",
    "deploy/local/backend.py",
    "deploy/local/runs.py",
    "deploy/local/paths.py",
    "deploy/local/supervisor.py",
    "deploy/local/launch.py",
]
KIND_WORDS = {kind.value for kind in WorkloadKind}


def test_each_panel_kind_has_a_deploy_spec_and_a_cluster_driver() -> None:
    assert set(kinds.KIND_MODULES) == set(KINDS) == KIND_WORDS
    for name in KINDS:
        spec = kinds.spec(name)
        assert spec.kind is WorkloadKind(name)
        assert kinds.spec(WorkloadKind(name)) is spec
        cluster = driver(WorkloadKind(name))
        for method in ("state", "observe_group", "after_event", "main_pods"):
            assert callable(getattr(cluster, method)), (name, method)
        assert isinstance(cluster.cacheable, bool)
    assert [s.kind for s in kinds.specs()] == [WorkloadKind(k) for k in kinds.KIND_MODULES]


def test_an_unregistered_kind_has_no_spec() -> None:
    with pytest.raises(KeyError):
        kinds.spec("batch")


def _objects(
    job: JobRequest, notebook: NotebookRequest, app: AppRequest
) -> dict[WorkloadKind, list[dict]]:
    autoscaled = make_app_request(scaling=Scaling(min_replicas=2, max_replicas=6, target_cpu=70))
    return {
        WorkloadKind.JOB: [manifests.make_job(job=job), manifests.make_jobset(job=job)],
        WorkloadKind.NOTEBOOK: [
            manifests.make_notebook_secret(notebook=notebook),
            manifests.make_notebook_service(notebook=notebook),
            manifests.make_notebook_statefulset(notebook=notebook),
        ],
        WorkloadKind.APP: [
            manifests.make_app_service(app=app),
            manifests.make_app_deployment(app=app),
            manifests.make_app_hpa(app=autoscaled),
            manifests.make_app_scaled_object(app=autoscaled),
        ],
    }


def _pod_labels(obj: dict) -> dict[str, str]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "JobSet":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    template = spec.get("template") or {}
    return (template.get("metadata") or {}).get("labels") or {}


def test_each_spec_agrees_with_its_manifests(
    job_request: JobRequest, notebook_request: NotebookRequest
) -> None:
    """An orphan's stop deletes every kind of object its manifests make (`running`), its
    user's pod carries the spec's component (logs, the watch), and the objects are named
    by the spec's `object_name` (the local run directory too)."""
    app = make_app_request()
    refs = {WorkloadKind.JOB: job_request.ref, WorkloadKind.NOTEBOOK: notebook_request.ref}
    refs[WorkloadKind.APP] = app.ref
    for kind, made in _objects(job_request, notebook_request, app).items():
        spec = kinds.spec(kind)
        assert {obj["kind"] for obj in made} <= set(spec.running), kind
        assert "Pod" in spec.running
        with_pods = [obj for obj in made if _pod_labels(obj)]
        assert with_pods, kind
        for obj in with_pods:
            assert _pod_labels(obj)[names.COMPONENT] == spec.component, (kind, obj["kind"])
        controller = with_pods[-1] if kind is not WorkloadKind.JOB else made[0]
        assert controller["metadata"]["name"] == spec.object_name(refs[kind]), kind
        assert (names.RUN in names.selector_labels(refs[kind])) is spec.numbered_runs


def _names_a_kind(path: Path) -> list[str]:
    """`WorkloadKind.X` attributes and kind words compared or used as keys."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "WorkloadKind":
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Compare):
            words = [ast.unparse(n) for n in [node.left, *node.comparators]]
            if any(re.fullmatch(r"[\"'](\w+)[\"']", w) and w[1:-1] in KIND_WORDS for w in words):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if any(re.search(r"\(\s*[\"'](notebook|app|job)[\"']", w) for w in words):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_shared_deploy_code_names_no_kind() -> None:
    named = [hit for module in SHARED for hit in _names_a_kind(ROOT / module)]
    assert named == []


def test_the_probe_finds_a_kind_named_in_shared_code(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(ref, plan):\n"
        "    if ref.kind is WorkloadKind.APP:\n"
        "        return 1\n"
        "    return plan['kind'] in ('notebook', 'app')\n"
    )
    assert len(_names_a_kind(probe)) == 2
