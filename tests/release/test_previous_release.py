"""The promise of docs/deploy-kubernetes.md ("Upgrades"): this release takes over from the
previous one. Its database, at the previous release's last migrations with rows written as that
schema had them, is migrated by this one with nothing lost; its manifests (k8s/ with every
component, as the previous release rendered them) are applied over by this release's in the
emulated API server, which refuses what a real one refuses (a Deployment's selector, a
StatefulSet's claim templates...). What the previous release left is in tests/release/<version>/
(scripts/release-snapshot writes it when a release is tagged)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import yaml

from deploy.kubernetes.api import MERGE_PATCH, KubeApi
from deploy.version import VERSION
from tests.deploy.test_ajuste_on_kubernetes import COMPONENTS, kustomize
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.store import KINDS, RESOURCES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
Obj = dict[str, Any]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def previous_release() -> Path:
    """The newest release recorded: this one's predecessor (or this one, until it is cut)."""
    recorded = [p for p in HERE.iterdir() if p.is_dir() and re.fullmatch(r"\d+\.\d+\.\d+", p.name)]
    eligible = [p for p in recorded if _version(p.name) <= _version(VERSION)]
    assert eligible, f"no release recorded in {HERE} for VERSION {VERSION}"
    return max(eligible, key=lambda p: _version(p.name))


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database of its own on the tests' PostgreSQL server, dropped afterwards."""
    url = urlsplit(os.environ["DATABASE_URL"])
    name = f"{url.path.lstrip('/')}_previous"
    admin = urlunsplit(url._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(url._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(database: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(HERE / "previous_db.py"), *args],
        cwd=ROOT,
        env=os.environ | {"DATABASE_URL": database, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_the_previous_releases_database_is_migrated_with_nothing_lost(
    empty_database: str,
) -> None:
    leaves = json.loads((previous_release() / "migrations.json").read_text())
    run(empty_database, "old", json.dumps(leaves))
    summary = json.loads(run(empty_database, "new").strip().splitlines()[-1])
    assert summary["job"] == ["RUNNING", "legacy", "ada", "ai1-1-cpu"]
    assert summary["log"] == ["epoch 1", "epoch 2"]
    assert summary["events"] == [["RUNNING", "started"]]
    assert summary["members"] == [["ada", "manager"]]
    # What this release adds to an upgraded database: its install identity.
    assert re.fullmatch(r"[0-9a-f]{16}", summary["install_id"])


def served(manifest: Obj) -> str | None:
    """The emulator's resource for a manifest's kind, where it serves that kind."""
    plural = next((p for p, kind in KINDS.items() if kind == manifest["kind"]), None)
    return plural if plural in RESOURCES else None


def path_of(manifest: Obj, plural: str, *, named: bool) -> str:
    group, version, namespaced = RESOURCES[plural]
    root = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespaced:
        root += f"/namespaces/{manifest['metadata']['namespace']}"
    return f"{root}/{plural}" + (f"/{manifest['metadata']['name']}" if named else "")


def render_this_release(tmp_path: Path) -> list[Obj]:
    """k8s/ with every component, as scripts/release-snapshot renders a release."""
    base = os.path.relpath(ROOT / "k8s", tmp_path)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "components": [f"{base}/components/{name}" for name in COMPONENTS],
        "configMapGenerator": [
            {
                "name": "ajuste-config",
                "namespace": "ajuste",
                "behavior": "merge",
                "literals": ["ALLOWED_HOSTS=panel.corp.example"],
            }
        ],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(tmp_path)


@pytest.mark.k8s
def test_this_releases_manifests_apply_over_the_previous_ones(
    tmp_path: Path, k8s_cluster: EmulatedCluster
) -> None:
    """`kubectl apply -k` of this release over the previous one's objects: every object the
    emulator serves is created, or merge-patched with this release's whole manifest, and the
    API server accepts each (kubectl's three-way merge also removes fields the new manifest
    drops: none of what is compared here depends on it)."""
    text = (previous_release() / "manifests.yaml").read_text()
    previous = [doc for doc in yaml.safe_load_all(text) if doc]
    api = KubeApi(k8s_cluster.api_client())
    k8s_cluster.create_namespace("ajuste")
    before = {}
    for manifest in previous:
        plural = served(manifest)
        if plural and manifest["kind"] != "Namespace":
            before[(manifest["kind"], manifest["metadata"]["name"])] = api._json(
                "POST", path_of(manifest, plural, named=False), body=manifest
            )
    assert {kind for kind, _ in before} >= {"Deployment", "StatefulSet", "Service", "ConfigMap"}
    applied = []
    for manifest in render_this_release(tmp_path):
        plural = served(manifest)
        if not plural:
            continue
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in before:
            path = path_of(manifest, plural, named=True)
            after = api._json("PATCH", path, body=manifest, content_type=MERGE_PATCH)
        else:
            after = api._json("POST", path_of(manifest, plural, named=False), body=manifest)
        applied.append(key)
        if manifest["kind"] in ("Deployment", "StatefulSet") and key in before:
            assert after["spec"]["selector"] == before[key]["spec"]["selector"], key
    assert ("Deployment", "ajuste-web") in applied and ("StatefulSet", "ajuste-postgres") in applied
