"""The release workflow (.github/workflows/release.yml) cannot run here (no CI service, no
registry): it is read instead. It is well-formed, runs on the version tag and checks it against
deploy/version.py, builds every image for amd64 and arm64, pushes one multi-arch manifest per
image, and builds the panel on the same Dockerfile base argument as CI (`make test-images`)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from deploy.version import TAG, VERSION

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def steps(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_it_is_a_workflow_run_by_the_version_tag() -> None:
    flow = workflow()
    trigger = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert trigger == {"push": {"tags": ["v*.*.*"]}}
    assert re.fullmatch(r"v\d+\.\d+\.\d+", TAG) and f"v{VERSION}" == TAG
    assert set(flow["jobs"]) == {"check", "images", "manifests"}
    assert flow["permissions"] == {"contents": "read", "packages": "write"}
    for job in flow["jobs"].values():
        assert all("run" in step or "uses" in step for step in job["steps"])


def test_the_check_compares_the_tag_with_deploy_version_and_the_changelog() -> None:
    check = steps(workflow()["jobs"]["check"])
    assert "deploy/version.py" in check and "$GITHUB_REF_NAME" in check
    assert "CHANGELOG.md" in check and "k8s/kustomization.yaml" in check
    # The sed the workflow reads VERSION with finds it.
    found = subprocess.run(
        ["sed", "-n", r's/^VERSION = "\(.*\)"/\1/p', "deploy/version.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found == VERSION
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(VERSION)} ", changelog, re.MULTILINE)


def test_every_image_for_both_architectures_then_one_manifest_each() -> None:
    jobs = workflow()["jobs"]
    matrix = jobs["images"]["strategy"]["matrix"]
    assert matrix["image"] == ["panel", "finetune", "serving"]
    assert matrix["arch"] == ["amd64", "arm64"]
    runners = {entry["arch"]: entry["runner"] for entry in matrix["include"]}
    assert runners == {"amd64": "ubuntu-24.04", "arm64": "ubuntu-24.04-arm"}  # native builds
    assert jobs["manifests"]["strategy"]["matrix"]["name"] == ["ajuste", "finetune", "serving"]
    assert jobs["manifests"]["needs"] == ["check", "images"]
    push = steps(jobs["manifests"])
    assert "-amd64" in push and "-arm64" in push and "manifest push --all" in push
    built = steps(jobs["images"])
    assert "scripts/build-images" in built
    targets = re.search(r"^\s+(panel \| finetune \| finetune-cpu \| serving)\)", _script(), re.M)
    assert targets is not None  # the names the matrix passes are build-images' targets


def test_the_panel_ships_on_the_base_ci_tests() -> None:
    """CI builds the panel with `--debian-base` (PYTHON_IMAGE: a base made from Debian's
    packages); the release workflow builds the panel image the same way."""
    makefile = (ROOT / "Makefile").read_text()
    test_images = makefile[makefile.index("\ntest-images:") :].split("\n\n")[0]
    assert "scripts/build-images --debian-base panel" in test_images
    built = steps(workflow()["jobs"]["images"])
    assert 'if [ "${{ matrix.image }}" = panel ]; then base=--debian-base; fi' in built
    assert 'python_args=(--build-arg "PYTHON_IMAGE=$BASE")' in _script()
    assert "ARG PYTHON_IMAGE=" in (ROOT / "Dockerfile").read_text()


def _script() -> str:
    return (ROOT / "scripts" / "build-images").read_text()
