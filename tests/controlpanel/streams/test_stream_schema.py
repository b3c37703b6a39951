"""The OpenAPI description has each workload kind's log stream beside its logs
(controlpanel/streams/schema.py), each valid OpenAPI."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from openapi_spec_validator import validate

from controlpanel.streams.asgi import API

pytestmark = pytest.mark.django_db


def test_every_kinds_stream_is_described_beside_its_logs(owner_client: Client) -> None:
    schema: dict[str, Any] = owner_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    streams = sorted(p for p in paths if p.endswith("/logs/stream/"))
    # Alone (other areas' components are not this test's): the paths and the security schemes.
    schemes = {"securitySchemes": schema["components"]["securitySchemes"]}
    validate(schema | {"paths": {p: paths[p] for p in streams}, "components": schemes})
    assert streams == [
        "/api/v1/apps/{id}/logs/stream/",
        "/api/v1/jobs/{id}/logs/stream/",
        "/api/v1/notebooks/{id}/logs/stream/",
    ]
    operation_ids = [op["operationId"] for item in paths.values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
    for path in streams:
        # The path the events server streams (the same pattern routes it on a cluster).
        assert API.match(re.sub(r"\{id\}", "0b6c7f1e-8d2a-4c55-9a51-1f1d6a3f9e20", path))
        operation = paths[path]["get"]
        logs = paths[path.removesuffix("stream/")]["get"]
        assert set(operation["responses"]) == {"200", "400", "401", "404", "429"}
        assert list(operation["responses"]["200"]["content"]) == ["text/event-stream"]
        named = {(p["in"], p["name"]) for p in operation["parameters"]}
        assert {("query", "after"), ("query", "run"), ("header", "Last-Event-ID")} <= named
        assert [p for p in logs["parameters"] if p["in"] == "path"] == [
            p for p in operation["parameters"] if p["in"] == "path"
        ]
        assert operation["tags"] == logs["tags"] and operation["security"] == logs["security"]
        assert "Last-Event-ID" in operation["description"]
