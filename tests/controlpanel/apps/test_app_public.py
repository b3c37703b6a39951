"""Making an app public is a manager's decision (issue 25): a public app serves its image's
pages and API to anyone with no log-in, so a plain member's request for one is refused with
the reason under `public` and nothing is made, through the API and through the form alike; a
manager's goes through."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.served.models import App
from controlpanel.served.services import PUBLIC_REFUSAL
from tests.fixtures.panel import api_client_for, logged_in

pytestmark = pytest.mark.django_db


def app_data(bucket: Bucket, **extra: Any) -> dict[str, Any]:
    return {
        "project": "alpha",
        "name": "chat",
        "model": f"{bucket.name}@LOCAL/tiny-llama",
        "flavor": "ai1-1-cpu",
        **extra,
    }


def test_the_api_makes_a_public_app_for_managers_only(
    member: Any, owner: Any, data_bucket: Bucket
) -> None:
    refused = api_client_for(member).post(
        "/api/v1/apps/", app_data(data_bucket, public=True), format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["public"] == [PUBLIC_REFUSAL]
    assert not App.objects.exists()
    private = api_client_for(member).post("/api/v1/apps/", app_data(data_bucket), format="json")
    assert private.status_code == 201, private.json()
    public = api_client_for(owner).post(
        "/api/v1/apps/", app_data(data_bucket, name="open", public=True), format="json"
    )
    assert public.status_code == 201, public.json()
    made = {app.name: app.params["public"] for app in App.objects.all()}
    assert made == {"chat": False, "open": True}


def test_the_form_says_so_and_refuses_a_members_public_app(
    member: Any, data_bucket: Bucket
) -> None:
    client = logged_in(member)
    page = client.get("/p/alpha/apps/new/").content.decode()
    assert PUBLIC_REFUSAL.replace("'", "&#x27;") in page
    assert 'name="public"' in page and "disabled" in page.split('name="public"')[1][:80]
    form = {
        "name": "chat",
        "model": f"{data_bucket.name}@LOCAL/tiny-llama",
        "flavor": "ai1-1-cpu",
        "gpu": "1",
        "scaling": "fixed",
        "replicas": "1",
        "probe_path": "/health",
        "port": "8000",
    }
    refused = client.post("/p/alpha/apps/new/", {**form, "public": "on"})
    assert refused.status_code == 400
    alerts = [line for line in refused.content.decode().splitlines() if "alert" in line]
    assert any(PUBLIC_REFUSAL.replace("'", "&#x27;") in line for line in alerts), alerts
    assert not App.objects.exists()
    made = client.post("/p/alpha/apps/new/", form)
    assert made.status_code == 302
    assert App.objects.get().params["public"] is False
