"""docker-compose.yml cannot run here (no Docker engine, no compose plugin): read it instead, and
check that it runs what the Procfile runs, that every dependency exists and that the stateful
services keep their data and report their health."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_procfile_process_is_a_service() -> None:
    processes = {
        line.split(":", 1)[0]
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert processes <= set(_compose()["services"]), processes - set(_compose()["services"])


def test_dependencies_exist_and_stateful_services_keep_data() -> None:
    compose = _compose()
    services = compose["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"
    for name in ("postgres", "redis", "s3"):
        assert services[name].get("healthcheck"), f"{name} has no health check"
        named = [v.split(":", 1)[0] for v in services[name]["volumes"]]
        assert all(v in compose["volumes"] for v in named), f"{name} loses its data"
    for name in ("web", "worker", "watcher", "beat", "migrate"):
        env = services[name]["environment"]
        assert env["DEBUG"] == "0" and env["SECRET_KEY"].startswith("${SECRET_KEY:?")


def test_no_archived_minio_and_a_pod_reachable_endpoint() -> None:
    """MinIO's community edition is archived; job pods in the cluster cannot resolve the
    Compose name of the S3 server, so they get S3_POD_ENDPOINT_URL, which must be set."""
    compose = _compose()
    images = [service.get("image", "") for service in compose["services"].values()]
    assert not [image for image in images if "minio" in image]
    env = compose["services"]["web"]["environment"]
    assert env["S3_ENDPOINT_URL"] == "http://s3:8333"
    assert env["S3_POD_ENDPOINT_URL"].startswith("${S3_POD_ENDPOINT_URL:?")
    assert "8333:8333" in compose["services"]["s3"]["ports"]


def test_the_kubeconfig_is_a_secret_and_no_process_pings_redis_for_liveness() -> None:
    compose = _compose()
    for name in ("worker", "watcher"):  # the processes that talk to the cluster
        service = compose["services"][name]
        assert service["secrets"] == ["kubeconfig"]
        assert service["environment"]["KUBECONFIG"] == "/run/secrets/kubeconfig"
    for name in ("web", "notifier", "beat", "migrate"):  # web faces the internet: no token
        assert "secrets" not in compose["services"][name], name
    assert compose["secrets"]["kubeconfig"]["file"] == "${KUBECONFIG_PATH:-./kubeconfig}"
    assert "inspect ping" not in str(compose["services"]["worker"]["healthcheck"])
    assert compose["services"]["migrate"]["command"][-1] == "migrate_locked"


def test_notebooks_and_apps_reach_the_panel_where_the_operator_says() -> None:
    """The user-content gateway on the cluster asks the panel about every request to a notebook
    or an app: with Compose, at an address of the Docker host (KUBERNETES_PANEL_URL), not a
    cluster Service; the panel answers that question at that host only."""
    from tests.deploy.test_ajuste_on_kubernetes import panel_settings

    env = _compose()["services"]["web"]["environment"]
    assert env["KUBERNETES_PANEL_URL"] == "${KUBERNETES_PANEL_URL:-}"
    derived = panel_settings(
        {"KUBERNETES_PANEL_URL": "http://docker-host.corp.example:8000"}, "KUBERNETES_PANEL_URL"
    )
    assert derived == ["http://docker-host.corp.example:8000"]


def test_the_docs_say_what_works_and_that_the_s3_identity_is_an_admin() -> None:
    """One SeaweedFS identity, an admin, which pods hold in `shared` mode: said plainly in the
    file and in the docs, beside what works without the cluster reaching this host."""
    identities = _compose()["configs"]["s3-identities"]["content"]
    assert identities.count('"name"') == 1 and '"Admin"' in identities
    docs = (ROOT / "docs" / "deploy-kubernetes.md").read_text()
    compose_docs = docs[docs.index("## 9. Docker Compose") :]
    for said in ("What works with Compose", "Try it", "is an admin, and job pods hold it"):
        assert said in compose_docs, said
    assert "every bucket of every project" in (ROOT / "docker-compose.yml").read_text()
