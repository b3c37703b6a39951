"""docker-compose.yml cannot run here (no Docker engine, no compose plugin): read it instead, and
check that it runs what the Procfile runs, that every dependency exists and that the stateful
services keep their data and report their health."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


def _default(value: str) -> str:
    """What a Compose `${NAME-default}` or `${NAME:-default}` gives when NAME is not set."""
    match = re.fullmatch(r"\$\{\w+:?-(.*)\}", value)
    assert match, value
    return match.group(1)


def test_pages_open_their_streams_at_the_events_service() -> None:
    """The events service runs the Procfile's uvicorn on the port it publishes, answers its
    health check, and every panel process gets STREAMS_URL (the pages' <meta>), which names
    that published port out of the box: with nothing between the browser and uvicorn, nothing
    buffers the events. An empty STREAMS_URL stays empty (pages poll)."""
    compose = _compose()
    events = compose["services"]["events"]
    assert events["command"][:2] == ["uvicorn", "controlpanel.asgi:application"]
    port = events["command"][events["command"].index("--port") + 1]
    assert f"{port}:{port}" in events["ports"]
    assert f"127.0.0.1:{port}/readyz" in str(events["healthcheck"]["test"])
    for name in ("web", "events", "worker"):  # the pages, the streams, the CLI's Link header
        value = compose["services"][name]["environment"]["STREAMS_URL"]
        assert value.startswith("${STREAMS_URL-"), (name, value)  # no ':': empty is kept
    streams = urlsplit(_default(compose["services"]["web"]["environment"]["STREAMS_URL"]))
    site = urlsplit(_default(compose["services"]["web"]["environment"]["SITE_URL"]))
    assert (streams.hostname, str(streams.port)) == (site.hostname, port)


def test_the_compose_defaults_let_a_page_open_its_stream() -> None:
    """The panel's settings read from Compose's defaults: the page may connect to the events
    service (CSP connect-src) and the events service takes the page's origin (SITE_URL)."""
    from tests.deploy.test_ajuste_on_kubernetes import panel_settings

    env = _compose()["services"]["web"]["environment"]
    streams_url, site_url = _default(env["STREAMS_URL"]), _default(env["SITE_URL"])
    found = panel_settings(
        {"STREAMS_URL": streams_url, "SITE_URL": site_url},
        "STREAMS_URL",
        "STREAMS_ALLOWED_ORIGINS",
        "CONTENT_SECURITY_POLICY",
    )
    assert found[0] == "http://localhost:8001" == streams_url
    assert site_url in found[1]
    assert "'http://localhost:8001'" in found[2].split("'connect-src'")[1].split("]")[0]
