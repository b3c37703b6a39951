"""k8s/admission-policy.yaml holds the panel's service account to the namespaces it manages.
No API server runs here, so its CEL expressions are evaluated with cel-python on the requests
the panel really makes (the manifests of deploy/) and on the ones it must never make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from deploy.manifests.projects import make_namespace, make_role_binding
from deploy.types import ProjectRequest

POLICY = Path(__file__).resolve().parents[2] / "k8s" / "admission-policy.yaml"
PANEL = "system:serviceaccount:ajuste:ajuste-controller"
PROJECT = ProjectRequest(slug="vision", namespace="ajuste-vision", gpu_quota=8)


def _policy() -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"].endswith("Policy"))


def _run(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(activation)


def admit(resource: str, obj: dict[str, Any], *, user: str = PANEL) -> list[str]:
    """The messages of the validations that refuse the request (none: admitted)."""
    spec = _policy()["spec"]
    namespace = obj["metadata"].get("namespace")
    namespace_object = (
        make_namespace(project=PROJECT)
        if namespace == PROJECT.namespace
        else (
            {"metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace}}}
        )
    )
    base = {
        "request": {"userInfo": {"username": user}, "resource": {"resource": resource}},
        "object": obj,
        "namespaceObject": namespace_object if namespace else None,
    }
    activation = {k: celpy.json_to_cel(v) for k, v in base.items()}
    if not all(_run(c["expression"], activation) for c in spec["matchConditions"]):
        return []
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celpy.json_to_cel(variables)
        variables[variable["name"]] = _run(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    results = [(v["message"], _run(v["expression"], activation)) for v in spec["validations"]]
    assert all(isinstance(r, celpy.celtypes.BoolType) for _, r in results), results  # no errors
    return [message for message, admitted in results if not admitted]


def _binding(installed_in: str = "ajuste", **changes: Any) -> dict[str, Any]:
    binding = make_role_binding(
        project=PROJECT, service_account="ajuste-controller", service_account_namespace=installed_in
    )
    binding["metadata"].update(changes.pop("metadata", {}))
    return binding | changes


def test_what_the_panel_does_is_admitted() -> None:
    assert admit("namespaces", make_namespace(project=PROJECT)) == []
    assert admit("rolebindings", _binding()) == []


@pytest.mark.parametrize(
    ("resource", "obj", "refusal"),
    [
        (
            "rolebindings",
            _binding(metadata={"namespace": "kube-system"}),
            "only writes in the project namespaces",
        ),
        (
            "rolebindings",
            _binding(roleRef={"apiGroup": "", "kind": "ClusterRole", "name": "cluster-admin"}),
            "binds only ajuste-project",
        ),
        (
            "rolebindings",
            _binding(subjects=[{"kind": "ServiceAccount", "name": "default", "namespace": "x"}]),
            "binds only ajuste-project",
        ),
        (
            "namespaces",
            {"metadata": {"name": "kube-system", "labels": {}}},
            "only writes in the project namespaces",
        ),
        (
            "namespaces",
            {
                "metadata": {
                    "name": "ajuste-vision",
                    "labels": {"app.kubernetes.io/managed-by": "ajuste"},
                }
            },
            "keeps the restricted Pod Security Standard",
        ),
    ],
)
def test_what_it_must_never_do_is_refused(resource: str, obj: dict[str, Any], refusal: str) -> None:
    assert any(refusal in message for message in admit(resource, obj))


def test_other_users_are_not_concerned() -> None:
    outside = _binding(metadata={"namespace": "kube-system"})
    assert admit("rolebindings", outside, user="admin") == []
    assert admit("rolebindings", outside, user="system:serviceaccount:kube-system:default") == []


def test_the_policy_follows_the_namespace_the_panel_is_installed_in() -> None:
    """No namespace is written in the policy: installed in `tools`, the panel's service account
    is held to the same rules and may bind only itself, not another install's account."""
    panel = "system:serviceaccount:tools:ajuste-controller"
    assert "s.namespace == " not in POLICY.read_text() and ":ajuste:" not in POLICY.read_text()
    assert admit("rolebindings", _binding(installed_in="tools"), user=panel) == []
    assert admit("namespaces", make_namespace(project=PROJECT), user=panel) == []
    assert "binds only ajuste-project, to itself" in " ".join(
        admit("rolebindings", _binding(installed_in="ajuste"), user=panel)
    )
    kube_system = _binding(installed_in="tools", metadata={"namespace": "kube-system"})
    assert "only writes in the project namespaces" in " ".join(
        admit("rolebindings", kube_system, user=panel)
    )
