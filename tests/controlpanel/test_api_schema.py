"""The OpenAPI schema served at /api/schema/ states what the server does: real answers of every
read route (and the writes that return a body) validate against the schema of their operation,
strictly (no undeclared key, formats checked), and every query parameter sent is declared.

A generated client broke on both counts before: `GET /api/v1/jobs/` was documented as an array
(it returns `{count, next, previous, results}`) without `limit`/`offset`, and `/api/v1/me/`
declared `format: email` while it answers `"email": ""` for an account without an address."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jsonschema
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.accounts.models import User
from controlpanel.engine.models import JobEvent, JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from storage import objects
from tests.controlpanel.buckets.conftest import datastore  # noqa: F401  (the test S3 server)

pytestmark = pytest.mark.django_db


def to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 → JSON Schema: `nullable` becomes a null alternative, and an object with
    declared properties takes no other key (the schema must name every key sent)."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: to_json_schema(schema) for name, schema in value.items()}
        elif key not in ("nullable", "example", "readOnly", "writeOnly", "description"):
            out[key] = to_json_schema(value)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("uri")
def _is_uri(value: object) -> bool:
    """`format: uri` (jsonschema checks it only with an optional package): absolute."""
    parts = urlsplit(str(value))
    return bool(parts.scheme and parts.netloc)


class Schema:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.components = to_json_schema(document["components"])
        self.checked: set[tuple[str, str]] = set()

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]]:
        for template, operations in self.document["paths"].items():
            pattern = "[^/]+".join(map(re.escape, re.split(r"\{[^/}]+\}", template)))
            if re.fullmatch(pattern, path) and method in operations:
                return template, operations[method]
        raise AssertionError(f"{method.upper()} {path} is not in the schema")

    def check(self, method: str, url: str, response: Any) -> None:
        parts = urlsplit(url)
        template, operation = self.operation(method, parts.path)
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        sent = {name for name, _ in parse_qsl(parts.query, keep_blank_values=True)}
        assert sent <= declared, f"{template}: undeclared query parameters {sent - declared}"
        status = str(response.status_code)
        answers = operation["responses"]
        assert status in answers, f"{method.upper()} {template} answered {status}, not declared"
        if response.status_code == 204:
            return
        body_schema = answers[status]["content"]["application/json"]["schema"]
        schema = {"allOf": [to_json_schema(body_schema)], "components": self.components}
        validator = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(response.json())
        ]
        assert not errors, f"{method.upper()} {template} ({status}): {errors}"
        self.checked.add((method, template))


@pytest.fixture
def schema(owner_api: APIClient) -> Schema:
    response = owner_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return Schema(response.json())


@pytest.fixture
def finished_job(project: Project, owner: User) -> Job:
    now = timezone.now()
    job = Job.objects.create(
        project=project,
        owner=owner,
        name="trained",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        labels={"team": "nlp"},
        state=JobState.DONE,
        exit_code=0,
        started_at=now - timedelta(minutes=3),
        finished_at=now,
        logs_archived=True,
        log_lines=2,
    )
    JobEvent.objects.create(job=job, run=1, state=JobState.DONE, reason="exit code 0")
    JobLogLine.objects.bulk_create(JobLogLine(job=job, run=1, seq=i, text=f"l{i}") for i in (1, 2))
    return job


def test_real_answers_match_the_schema(
    schema: Schema,
    owner_api: APIClient,
    owner: User,
    member: User,
    finished_job: Job,
    datastore: Any,  # noqa: F811
) -> None:
    owner.email = ""  # an account without an address answers "email": ""
    owner.save()

    def call(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        response = getattr(owner_api, method)(url, body, format="json")
        assert response.status_code < 300, (url, response.content)
        schema.check(method, url, response)
        return response.json() if response.content else None

    bucket = call("post", "/api/v1/buckets/?project=alpha", {"name": "schema-check"})["name"]
    objects.put_object(datastore, bucket=bucket, key="dir/a.txt", data=b"abc")
    objects.put_object(datastore, bucket=bucket, key="b.txt", data=b"")
    base = f"/api/v1/buckets/LOCAL/{bucket}/"
    job = f"/api/v1/jobs/{finished_job.pk}/"
    call("post", "/api/v1/tokens/", {"name": "second"})
    for url in [
        "/api/v1/me/",
        "/api/v1/projects/",
        "/api/v1/projects/?limit=1&offset=0",
        "/api/v1/projects/alpha/",
        "/api/v1/projects/alpha/members/",
        "/api/v1/tokens/?limit=1",
        "/api/v1/flavors/",
        "/api/v1/flavors/h100-1-gpu/",
        "/api/v1/datastores/",
        "/api/v1/jobs/?project=alpha",
        "/api/v1/jobs/?project=alpha&label=team=nlp&state=done&owner=owner&q=train&limit=5",
        f"{job}?project=alpha",
        f"{job}logs/?project=alpha&after=0&limit=10&run=1",
        "/api/v1/buckets/?project=alpha",
        f"{base}?refresh=true",
        f"{base}objects/",
        f"{base}objects/?prefix=dir/&delimiter=/&limit=1",
        f"{base}objects/?delimiter=",
        f"{base}download-url/?key=b.txt",
    ]:
        call("get", url)
    call("post", f"{base}upload-url/", {"key": "c.txt", "content_type": "text/plain"})
    plan = call("post", f"{base}uploads/", {"key": "d.bin", "size": 10})
    upload = {"key": "d.bin", "upload_id": plan["upload_id"]}
    call("post", f"{base}uploads/parts/", {**upload, "part_numbers": [1]})
    call("post", f"{base}uploads/abort/", upload)
    call("post", f"{base}objects/delete/", {"keys": ["b.txt"]})
    call("post", f"{job}rerun/?project=alpha")
    assert owner_api.get("/api/v1/me/").json()["email"] == ""
    lists = {t for m, t in schema.checked if t.endswith("/") and "{" not in t.split("/")[-2]}
    assert {"/api/v1/jobs/", "/api/v1/projects/", "/api/v1/tokens/", "/api/v1/buckets/"} <= lists


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/projects/", "/api/v1/tokens/"])
def test_every_paginated_list_declares_its_envelope_and_parameters(
    schema: Schema, path: str
) -> None:
    operation = schema.document["paths"][path]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert {"limit", "offset"} <= names
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    envelope = schema.document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert envelope["required"] == ["count", "next", "previous", "results"]
    assert envelope["properties"]["results"]["type"] == "array"


def test_the_submission_schema_is_the_contract(
    schema: Schema, owner_api: APIClient, k8s_jobs: Any
) -> None:
    """The request body of POST /api/v1/jobs/ is built from contract.FIELDS: a submission the
    API takes validates against it, and both its 201 and a refusal's keyed 400 match."""
    from controlpanel.jobs import contract

    operation = schema.document["paths"]["/api/v1/jobs/"]["post"]
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body_schema = schema.document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(body_schema["properties"]) == {"project", *(f.name for f in contract.FIELDS)}
    assert body_schema["required"] == ["flavor"]
    assert body_schema["properties"]["env"]["additionalProperties"] == {"type": "string"}
    assert body_schema["properties"]["volumes"]["items"] == {"type": "string"}
    body = {
        "name": "schema",
        "image": "x/y:1",
        "command": ["python", "-c", "print(1)"],
        "flavor": "h100-1-gpu",
        "gpu": 1,
        "env": {"A": "1"},
        "labels": {"team": "nlp"},
        "timeout": 3600,
    }
    validator = jsonschema.Draft202012Validator(
        {"allOf": [to_json_schema(body_schema)], "components": schema.components}
    )
    assert not list(validator.iter_errors(body))
    url = "/api/v1/jobs/?project=alpha"
    created = owner_api.post(url, body, format="json")
    assert created.status_code == 201, created.content
    schema.check("post", url, created)
    refused = owner_api.post(url, body | {"env": {"AWS_X": "1"}}, format="json")
    assert refused.json() == {
        "env.AWS_X": ["AWS_X is reserved: credentials reach jobs only through volumes."]
    }
    schema.check("post", url, refused)
