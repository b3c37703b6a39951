"""Upload limits: the largest object an upload may make (UPLOAD_MAX_GIB), checked at the start
against the size declared and at the end against what the parts hold (the declared size is the
client's word), and how many uploads one user may start in an hour (UPLOADS_PER_HOUR)."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from storage import objects
from storage.datastore import DatastoreConfig
from tests.fixtures.panel import api_client_for

MiB = 1024 * 1024


@pytest.fixture
def made(datastore: DatastoreConfig, owner_api: APIClient, name: str) -> str:
    response = owner_api.post("/api/v1/buckets/", {"name": name}, format="json")
    assert response.status_code == 201, response.content
    return f"/api/v1/buckets/LOCAL/{name}/"


def test_an_upload_declared_too_big_is_refused_before_it_starts(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = 2 * 1024**3
    refused = owner_api.post(made + "uploads/", {"key": "k", "size": 3 * 1024**3}, format="json")
    assert refused.status_code == 400
    assert refused.json()["size"] == ["An upload holds at most 2 GiB on this panel."]
    fits = owner_api.post(made + "uploads/", {"key": "k", "size": 2 * 1024**3}, format="json")
    assert fits.status_code == 201


def test_parts_holding_more_than_the_limit_are_not_assembled(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient, settings: Any
) -> None:
    """A client declares 5 MiB, then sends two parts of 5 MiB each: the object is not kept."""
    settings.UPLOAD_MAX_BYTES = 6 * MiB
    plan = owner_api.post(made + "uploads/", {"key": "big.bin", "size": 5 * MiB}, format="json")
    assert plan.status_code == 201, plan.content
    upload = {"key": "big.bin", "upload_id": plan.json()["upload_id"]}
    urls = owner_api.post(
        made + "uploads/parts/", {**upload, "part_numbers": [1, 2]}, format="json"
    ).json()["parts"]
    parts = []
    for part in urls:
        answer = httpx.put(part["url"], content=os.urandom(5 * MiB))
        assert answer.status_code == 200
        parts.append({"part_number": part["part_number"], "etag": answer.headers["ETag"]})
    done = owner_api.post(made + "uploads/complete/", {**upload, "parts": parts}, format="json")
    assert done.status_code == 400
    assert done.json()["parts"] == [
        "The parts hold 10485760 bytes, more than 6291456 bytes, the most an upload may hold "
        "on this panel: the object is deleted."
    ]
    assert not objects.object_exists(datastore, bucket=name, key="big.bin")
    # One part of the two fits: that object is made.
    settings.UPLOAD_MAX_BYTES = 2 * 1024**3
    plan = owner_api.post(made + "uploads/", {"key": "ok.bin", "size": 5 * MiB}, format="json")
    upload = {"key": "ok.bin", "upload_id": plan.json()["upload_id"]}
    url = owner_api.post(
        made + "uploads/parts/", {**upload, "part_numbers": [1]}, format="json"
    ).json()["parts"][0]["url"]
    etag = httpx.put(url, content=b"x" * MiB).headers["ETag"]
    done = owner_api.post(
        made + "uploads/complete/",
        {**upload, "parts": [{"part_number": 1, "etag": etag}]},
        format="json",
    )
    assert done.status_code == 200, done.content


def test_uploads_per_hour_per_user(
    made: str, owner: Any, member: Any, owner_api: APIClient, settings: Any
) -> None:
    settings.UPLOADS_PER_HOUR = 2
    hour = int(time.time() // 3600)  # the counts of this hour and the next (a run across it)
    cache.delete_many([f"uploads:{u.pk}:{h}" for u in (owner, member) for h in (hour, hour + 1)])
    assert owner_api.post(made + "upload-url/", {"key": "a"}, format="json").status_code == 200
    assert (
        owner_api.post(made + "uploads/", {"key": "b", "size": 1}, format="json").status_code == 201
    )
    third = owner_api.post(made + "upload-url/", {"key": "c"}, format="json")
    assert third.status_code == 429
    assert 0 < int(third["Retry-After"]) <= 3600
    also = owner_api.post(made + "uploads/", {"key": "d", "size": 1}, format="json")
    assert also.status_code == 429
    # Another user of the same project has their own count; other calls are not counted.
    member_api = api_client_for(member)
    assert member_api.post(made + "upload-url/", {"key": "e"}, format="json").status_code == 200
    assert owner_api.get(made + "download-url/", {"key": "a"}).status_code in (200, 404)
    settings.UPLOADS_PER_HOUR = 0  # no limit
    assert owner_api.post(made + "upload-url/", {"key": "f"}, format="json").status_code == 200
