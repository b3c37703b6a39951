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
    for name in ("postgres", "redis", "minio"):
        assert services[name].get("healthcheck"), f"{name} has no health check"
        named = [v.split(":", 1)[0] for v in services[name]["volumes"]]
        assert all(v in compose["volumes"] for v in named), f"{name} loses its data"
    for name in ("web", "worker", "watcher", "beat", "migrate"):
        env = services[name]["environment"]
        assert env["DEBUG"] == "0" and env["SECRET_KEY"].startswith("${SECRET_KEY:?")
