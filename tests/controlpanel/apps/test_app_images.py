"""App images come from an admin-kept list (issue 25): an app serves its image's pages to its
visitors, so a member may not deploy an image of their own. An image off the list (or one the
admin disabled) is refused under `image` with the list in the sentence, and nothing is made,
through the API and through the form alike; the default serving image is on the list."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.served.models import App, AppImage
from deploy import images
from tests.fixtures.panel import api_client_for, logged_in

pytestmark = pytest.mark.django_db

UNLISTED = "evil.example.com/phish:1"


def refusal(image: str, listed: str) -> str:
    return (
        f"{image} is not on this site's list of app images ({listed}): apps run only images "
        "a site admin has added (Django admin, App images)."
    )


def test_the_api_refuses_an_image_off_the_list(member: Any, data_bucket: Bucket) -> None:
    data = {
        "project": "alpha",
        "name": "chat",
        "model": f"{data_bucket.name}@LOCAL/tiny-llama",
        "flavor": "ai1-1-cpu",
    }
    client = api_client_for(member)
    refused = client.post("/api/v1/apps/", {**data, "image": UNLISTED}, format="json")
    assert refused.status_code == 400
    assert refused.json()["image"] == [refusal(UNLISTED, images.SERVING_IMAGE)]
    assert not App.objects.exists()
    AppImage.objects.filter(image=images.SERVING_IMAGE).update(enabled=False)
    disabled = client.post("/api/v1/apps/", data, format="json")
    assert disabled.status_code == 400
    assert disabled.json()["image"] == [refusal(images.SERVING_IMAGE, "none")]
    assert not App.objects.exists()
    AppImage.objects.filter(image=images.SERVING_IMAGE).update(enabled=True)
    made = client.post("/api/v1/apps/", data, format="json")
    assert made.status_code == 201, made.json()
    assert App.objects.get().image == images.SERVING_IMAGE


def test_the_form_refuses_an_image_off_the_list(member: Any, data_bucket: Bucket) -> None:
    client = logged_in(member)
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
    hostile = "<b>x</b>/y:1"
    refused = client.post("/p/alpha/apps/new/", {**form, "image": UNLISTED})
    assert refused.status_code == 400
    escaped_refusal = refusal(UNLISTED, images.SERVING_IMAGE).replace("'", "&#x27;")
    assert escaped_refusal in refused.content.decode()
    assert not App.objects.exists()
    escaped = client.post("/p/alpha/apps/new/", {**form, "image": hostile}).content.decode()
    assert "<b>x</b>" not in escaped and App.objects.count() == 0
    made = client.post("/p/alpha/apps/new/", {**form, "image": images.SERVING_IMAGE})
    assert made.status_code == 302
    assert App.objects.get().image == images.SERVING_IMAGE
