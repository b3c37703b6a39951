"""Sizes read the same on the pages and in the CLI: binary units (KiB, MiB...), where the pages
used to say KB (Django's filesizeformat) for the same 1024-byte units the CLI calls KiB."""

from __future__ import annotations

from typing import Any

import pytest
from django.template import Context, Template
from django.test import Client
from django.utils import timezone

from controlpanel.buckets.models import Bucket
from controlpanel.cli.output import human_size
from controlpanel.core.units import binary_size


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * 1024**2, "5.0 MiB"),
        (3 * 1024**3 + 1, "3.0 GiB"),
        (2 * 1024**4, "2.0 TiB"),
        (4 * 1024**6, "4096.0 PiB"),
    ],
)
def test_binary_size(size: int | None, text: str) -> None:
    assert binary_size(size) == text
    assert human_size(size) == text  # the CLI's
    rendered = Template("{{ size|binary_size }}").render(Context({"size": size}))
    assert rendered == text  # the pages' (a builtin filter: no {% load %})


@pytest.mark.django_db
def test_the_bucket_list_shows_the_cli_units(
    project: Any, owner: Any, owner_client: Client
) -> None:
    Bucket.objects.create(
        project=project,
        datastore="LOCAL",
        name="sized",
        object_count=2,
        total_size=1536,
        stats_at=timezone.now(),
    )
    page = owner_client.get("/p/alpha/buckets/").content.decode()
    assert ">1.5 KiB<" in page and "KB" not in page
