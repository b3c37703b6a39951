"""One journey in Chromium under the strict CSP: create a bucket, upload a folder of two files
straight to S3 (one of them in multipart parts) with a progress bar each, see them listed,
download one."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from storage import objects
from storage.datastore import DatastoreConfig
from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_create_upload_folder_browse_and_download(
    page: Any,
    live_server: Any,
    owner: Any,
    datastore: DatastoreConfig,
    settings: Any,
    name: str,
    tmp_path: Path,
) -> None:
    settings.S3_CORS_ORIGINS = [live_server.url]
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "small <b>.txt").write_text("hello from the browser")
    big = os.urandom(17 * 1024 * 1024)  # over 16 MiB: two multipart parts
    (folder / "big.bin").write_bytes(big)

    browser_login(page, live_server.url, "owner", PASSWORD)
    page.wait_for_url(f"{live_server.url}/p/alpha/")
    page.click("nav >> text=Object Storage")
    page.fill("input[name=name]", name)
    page.click("button[value=create]")
    page.click(f"[data-testid=buckets] >> text={name}")
    page.wait_for_url(f"{live_server.url}/p/alpha/buckets/LOCAL/{name}/")

    page.set_input_files("#upload-folder", str(folder))
    page.click("#upload-form button[type=submit]")
    done = page.locator("#upload-queue li[data-state=done]")
    done.nth(1).wait_for(timeout=60_000)
    assert done.count() == 2
    for bar in page.locator("#upload-queue progress").all():
        assert bar.evaluate("b => b.value === b.max")
    assert sorted(page.locator("#upload-queue .name").all_inner_texts()) == [
        "corpus/big.bin",
        "corpus/small <b>.txt",
    ]

    page.click("[data-testid=folder] >> text=corpus/")  # the listing refreshed itself
    page.wait_for_url("**prefix=corpus%2F")
    # htmx pushes the URL before it swaps: wait for the folder's own listing.
    page.locator("#listing[data-prefix='corpus/']").wait_for()
    assert page.locator("[data-testid=object]").all_inner_texts() == ["big.bin", "small <b>.txt"]
    # Filtering as one types: an htmx swap of the listing, once htmx has taken the new listing
    # in (keys typed before its settle step attaches the triggers send nothing).
    listing = page.locator("#listing[data-prefix='corpus/']")
    expect(listing).not_to_have_class(re.compile(r"\bhtmx-added\b"))
    listing.locator("#filter-q").type("sm")
    page.locator("[data-testid=object]", has_text="big.bin").wait_for(state="detached")
    assert page.locator("[data-testid=object]").all_inner_texts() == ["small <b>.txt"]
    with page.expect_download() as download:
        page.click("[data-testid=object] >> text=small <b>.txt")
    # The exact name travels (RFC 5987); Chromium itself swaps '<' and '>' for '_' on disk.
    assert download.value.suggested_filename == "small _b_.txt"
    assert Path(download.value.path()).read_text() == "hello from the browser"
    stored = objects.read_object(datastore, bucket=name, key="corpus/big.bin", max_bytes=len(big))
    assert stored == big
