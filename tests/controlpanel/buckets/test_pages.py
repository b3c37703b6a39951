"""Server-rendered pages and htmx fragments: bucket list, object browser, delete flows,
downloads, and keys that try to break out of the HTML."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, quote

import httpx
import pytest
from django.test import Client
from django.utils import timezone

from controlpanel.buckets import listing, services
from controlpanel.buckets.models import Bucket, BucketState
from controlpanel.projects.access import ProjectAccess
from storage import objects
from storage.client import clear_client_cache
from storage.datastore import DatastoreConfig
from storage.errors import AccessDenied

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
NASTY = [
    "<img src=x onerror=alert(1)>.txt",
    "<script>alert(1)</script>.txt",  # a '/' inside: a folder named `<script>alert(1)<`
    "../escape.txt",
    "a b & c.txt",
    "quote\"and'apostrophe.txt",
    "ünïcödé/ファイル 𝄞.txt",
    "x" * 300 + ".bin",
]


@pytest.fixture
def bucket(datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str) -> Bucket:
    return services.bucket_create(access=access, by=owner, name=name)


def _page(client: Client, bucket: Bucket, **params: str) -> str:
    response = client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/", params)
    assert response.status_code == 200
    return response.content.decode()


def _rows(page: str) -> list[str]:
    """The names in the object table, folders first, as the user reads them."""
    found = re.findall(
        r'data-testid="(?:folder|object)"[^>]*>'
        r'(?:<span class="icon-folder"[^>]*></span>)?(.*?)</(?:a|span)>',
        page,
    )
    return [html.unescape(re.sub(r"<[^>]+>", "", text)) for text in found]


def test_list_page_shows_buckets_and_the_forms(bucket: Bucket, owner_client: Client) -> None:
    page = owner_client.get("/p/alpha/buckets/").content.decode()
    assert f'data-bucket="{bucket.name}"' in page
    assert 'name="action" value="attach"' in page and "LOCAL (http://127.0.0.1:" in page
    nav = re.search(r'<a href="/p/alpha/buckets/" aria-current="page">Object Storage</a>', page)
    assert nav is not None


def test_create_from_the_page_and_htmx_errors_inline(
    datastore: DatastoreConfig, name: str, owner_client: Client
) -> None:
    response = owner_client.post(
        "/p/alpha/buckets/", {"name": name, "datastore": "LOCAL", "action": "create"}
    )
    assert response.status_code == 302
    assert objects.bucket_exists(datastore, bucket=name)
    bad = owner_client.post(
        "/p/alpha/buckets/", {"name": "no_way", "datastore": "LOCAL", "action": "create"}, **HTMX
    )
    assert bad.status_code == 400
    fragment = bad.content.decode()
    assert fragment.lstrip().startswith('<div id="buckets-panel">') and "<html" not in fragment
    assert "invalid character &#x27;_&#x27; at position 2" in fragment


def test_attach_from_the_page(
    datastore: DatastoreConfig, name: str, owner_client: Client, grant: Any
) -> None:
    grant(name)
    missing = owner_client.post(
        "/p/alpha/buckets/", {"name": name, "datastore": "LOCAL", "action": "attach"}
    )
    assert missing.status_code == 400
    assert f"There is no bucket named {name} on LOCAL." in missing.content.decode()
    objects.create_bucket(datastore, bucket=name)
    ok = owner_client.post(
        "/p/alpha/buckets/", {"name": name, "datastore": "LOCAL", "action": "attach"}, follow=True
    )
    assert f"Bucket {name} attached." in ok.content.decode()
    assert Bucket.objects.get(name=name).origin == "attached"


def test_browser_shows_folders_first_with_sizes_dates_and_etags(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client
) -> None:
    for key, data in [("z.txt", b"12345"), ("a.txt", b"1"), ("data/one", b""), ("b/", b"")]:
        objects.put_object(datastore, bucket=bucket.name, key=key, data=data)
    page = _page(owner_client, bucket)
    assert _rows(page) == ["b/", "data/", "a.txt", "z.txt"]
    etag = objects.head_object(datastore, bucket=bucket.name, key="z.txt").etag
    assert etag in page and ">5 B<" in page
    inside = _page(owner_client, bucket, prefix="data/")
    assert _rows(inside) == ["one"]
    assert f'href="/p/alpha/buckets/LOCAL/{bucket.name}/?prefix=data%2F"' in inside


def test_pagination_filter_and_sort(
    bucket: Bucket,
    datastore: DatastoreConfig,
    owner_client: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listing, "PAGE_SIZE", 3)
    for index in range(7):
        objects.put_object(datastore, bucket=bucket.name, key=f"f{index}", data=b"x" * index)
    seen: list[str] = []
    params: dict[str, str] = {}
    for _ in range(3):
        page = _page(owner_client, bucket, **params)
        seen += _rows(page)
        next_link = re.search(r'href="([^"]+)"[^>]*data-testid="next-page"', page)
        if next_link is None:
            break
        query = html.unescape(next_link.group(1)).split("?", 1)[1]
        params = dict(part.split("=", 1) for part in query.split("&"))
        params = {k: httpx.URL("?" + f"{k}={v}").params[k] for k, v in params.items()}
    assert seen == [f"f{index}" for index in range(7)]
    assert "Page 3" in page and 'data-testid="next-page"' not in page
    assert _rows(_page(owner_client, bucket, q="f1")) == ["f1"]
    assert _rows(_page(owner_client, bucket, sort="-size")) == ["f2", "f1", "f0"]


def _link(page: str, testid: str) -> dict[str, list[str]] | None:
    """The query parameters of the pager link `testid`, or None if the page has none."""
    found = re.search(rf'href="([^"]+)"[^>]*data-testid="{testid}"', page)
    if found is None:
        return None
    return parse_qs(html.unescape(found.group(1)).split("?", 1)[1])


def test_previous_page_walks_back_and_the_sort_says_it_covers_one_page(
    bucket: Bucket,
    datastore: DatastoreConfig,
    owner_client: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listing, "PAGE_SIZE", 2)
    for index in range(7):
        objects.put_object(datastore, bucket=bucket.name, key=f"f{index}", data=b"x" * index)
    pages = [_page(owner_client, bucket)]
    assert _link(pages[0], "previous-page") is None
    assert 'data-testid="sort-scope"' in pages[0] and "this page only" in pages[0]
    while (params := _link(pages[-1], "next-page")) is not None:
        pages.append(_page(owner_client, bucket, **params))  # type: ignore[arg-type]
    assert [_rows(page) for page in pages] == [["f0", "f1"], ["f2", "f3"], ["f4", "f5"], ["f6"]]
    assert "Page 4" in pages[-1] and _link(pages[-1], "first-page") is not None
    back = pages[-1]
    for expected in (["f4", "f5"], ["f2", "f3"], ["f0", "f1"]):
        params = _link(back, "previous-page")
        assert params is not None
        back = _page(owner_client, bucket, **params)  # type: ignore[arg-type]
        assert _rows(back) == expected
    assert "Page 1" in back and _link(back, "previous-page") is None
    # Sorting keeps the page shown (it orders that page), and its way back.
    sort = re.search(r'href="([^"]+)"[^>]*>Size</a>', pages[2])
    assert sort is not None
    params = parse_qs(html.unescape(sort.group(1)).split("?", 1)[1])
    assert params["sort"] == ["-size"] and params["page"] == ["3"]
    sorted_page = _page(owner_client, bucket, **params)  # type: ignore[arg-type]
    assert _rows(sorted_page) == ["f5", "f4"]
    previous = _link(sorted_page, "previous-page")
    assert previous is not None and previous["sort"] == ["-size"]
    assert _rows(_page(owner_client, bucket, **previous)) == ["f3", "f2"]  # type: ignore[arg-type]


def test_a_single_page_has_no_pager_links_nor_the_sort_caveat(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client
) -> None:
    objects.put_object(datastore, bucket=bucket.name, key="only.txt", data=b"1")
    page = _page(owner_client, bucket)
    for testid in ("sort-scope", "next-page", "previous-page", "first-page"):
        assert f'data-testid="{testid}"' not in page


def test_the_previous_page_chain_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "MAX_BACK_CHARS", 10)
    here = listing.Listing(prefix="", query="", sort="name", page=9, token="t9", back=["t8"])
    query = parse_qs(here.next_link("t10-long-x")[1:])
    assert query["back"] == ["t8", "t9"] and query["page"] == ["10"]
    long = listing.Listing(prefix="", query="", sort="name", page=3, token="x" * 8, back=["y" * 8])
    assert parse_qs(long.next_link("z")[1:])["back"] == ["x" * 8]  # the oldest dropped
    trimmed = listing.Listing(prefix="", query="", sort="name", page=5, token="t5", back=[])
    assert trimmed.previous_query is None  # the first page is still linked


def test_nasty_keys_are_escaped_and_downloadable(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client
) -> None:
    for index, key in enumerate(NASTY):
        objects.put_object(datastore, bucket=bucket.name, key=key, data=str(index).encode())
    for params, headers in [({}, {}), ({}, HTMX), ({"prefix": "ünïcödé/"}, HTMX)]:
        page = owner_client.get(
            f"/p/alpha/buckets/LOCAL/{bucket.name}/", params, **headers
        ).content.decode()
        assert "<script>alert" not in page and "<img src=x" not in page
        assert 'quote"and' not in page
    page = _page(owner_client, bucket)
    assert "&lt;img src=x onerror=alert(1)&gt;.txt" in page
    assert "</span>&lt;script&gt;alert(1)&lt;/</a>" in page
    assert _rows(page)[:3] == ["../", "<script>alert(1)</", "ünïcödé/"]
    for index, key in enumerate(NASTY):
        if "/" in key:
            continue  # inside a folder: reached through it below
        link = f"/p/alpha/buckets/LOCAL/{bucket.name}/download/?key={quote(key, safe='')}"
        assert html.escape(link) in page or link in page, key
        response = owner_client.get(link)
        assert response.status_code == 302
        assert httpx.get(response["Location"]).content == str(index).encode()
    inner = _page(owner_client, bucket, prefix="<script>alert(1)</")
    assert _rows(inner) == ["script>.txt"] and "<script>" not in inner
    assert _rows(_page(owner_client, bucket, prefix="../")) == ["escape.txt"]
    # URL normalisation would turn /bucket/../escape.txt into /escape.txt: no link, a reason.
    escaped = owner_client.get(
        f"/p/alpha/buckets/LOCAL/{bucket.name}/download/", {"key": "../escape.txt"}
    )
    assert escaped.status_code == 400
    assert "'.' or '..' path segment" in escaped.content.decode()


def test_a_key_with_a_control_character_gets_a_400_and_no_link(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client
) -> None:
    objects.put_object(datastore, bucket=bucket.name, key="tab\there.txt", data=b"1")
    page = _page(owner_client, bucket)
    assert _rows(page) == ["tab⟨U+0009⟩here.txt"]  # shown, not hidden
    assert "No download link: The key has the control character" in page
    url = f"/p/alpha/buckets/LOCAL/{bucket.name}/download/"
    for key in ("a\x00b", "tab\there.txt"):
        response = owner_client.get(url, {"key": key})
        assert response.status_code == 400, key
        assert "control character" in response.content.decode()


def test_htmx_gets_the_listing_fragment_and_history_restore_the_page(
    bucket: Bucket, owner_client: Client
) -> None:
    url = f"/p/alpha/buckets/LOCAL/{bucket.name}/"
    fragment = owner_client.get(url, **HTMX)
    assert fragment.content.decode().lstrip().startswith('<div id="listing"')
    assert "HX-Request" in fragment["Vary"]
    restored = owner_client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert "<html" in restored.content.decode()


def test_the_browser_page_lets_the_browser_reach_the_datastore(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client
) -> None:
    csp = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/")["Content-Security-Policy"]
    connect = next(part for part in csp.split(";") if "connect-src" in part)
    assert datastore.endpoint_url in connect and "'self'" in connect
    other = owner_client.get("/p/alpha/buckets/")["Content-Security-Policy"]
    assert datastore.endpoint_url not in other
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp


def test_the_page_lets_the_browser_reach_the_public_endpoint(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client, settings: Any
) -> None:
    settings.S3_PUBLIC_ENDPOINT_URL = "http://localhost:9000"
    csp = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/")["Content-Security-Policy"]
    connect = next(part for part in csp.split(";") if "connect-src" in part)
    assert "http://localhost:9000" in connect and datastore.endpoint_url not in connect


def test_the_page_says_when_browser_uploads_lack_cors(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    owner_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    grant: Any,
) -> None:
    objects.create_bucket(datastore, bucket=name)
    grant(name)

    def refuse(*args: Any, **kwargs: Any) -> bool:
        raise AccessDenied("AccessDenied: no (x)", code="AccessDenied")

    monkeypatch.setattr(objects, "add_bucket_cors", refuse)
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    page = _page(owner_client, bucket)
    assert 'data-testid="cors-warning"' in page
    assert "refused to set the CORS rule browser uploads need (AccessDenied)" in page
    assert "http://testserver" in page


def test_delete_selected_objects_and_folders(
    bucket: Bucket, datastore: DatastoreConfig, owner_client: Client
) -> None:
    for key in ("keep", "sub/a", "sub/b", "sub/x", "sub/deep/c"):
        objects.put_object(datastore, bucket=bucket.name, key=key, data=b"")
    response = owner_client.post(
        f"/p/alpha/buckets/LOCAL/{bucket.name}/objects/delete/",
        {"prefix": "sub/", "key": ["sub/a", "sub/b"], "folder": ["sub/deep/"]},
    )
    assert response.status_code == 302
    assert response["Location"].endswith("?prefix=sub%2F")
    remaining = sorted(o.key for o in objects.iter_objects(datastore, bucket=bucket.name))
    assert remaining == ["keep", "sub/x"]
    assert "Deleted 3 objects." in owner_client.get(response["Location"]).content.decode()


def test_delete_page_refuses_non_empty_then_empties_with_progress(
    bucket: Bucket,
    datastore: DatastoreConfig,
    owner_client: Client,
    django_capture_on_commit_callbacks: Any,
) -> None:
    objects.put_object(datastore, bucket=bucket.name, key="k", data=b"1")
    url = f"/p/alpha/buckets/LOCAL/{bucket.name}/delete/"
    assert owner_client.get(url).status_code == 200
    refused = owner_client.post(url, {})
    assert refused.status_code == 409
    assert 'data-testid="not-empty"' in refused.content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        started = owner_client.post(url, {"empty": "on"})
    assert started.status_code == 302 and len(callbacks) == 1
    Bucket.objects.filter(pk=bucket.pk).update(empty_done=1, empty_total=4)
    row = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/row/").content.decode()
    assert 'hx-trigger="every 2s,' in row and "emptying: 1 of 4 deleted" in row
    assert '<progress max="4" value="1"' in row
    Bucket.objects.filter(pk=bucket.pk).delete()
    gone = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/row/")
    assert (gone.status_code, gone.content) == (200, b"")


def test_a_counted_row_stops_polling(bucket: Bucket, owner_client: Client) -> None:
    assert bucket.state == BucketState.READY and bucket.stats_at is not None
    row = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/row/").content.decode()
    assert "hx-trigger" not in row and ">0</td>" in row


def test_detach_an_attached_bucket_from_the_page(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    owner_client: Client,
    grant: Any,
) -> None:
    objects.create_bucket(datastore, bucket=name)
    grant(name)
    services.bucket_attach(access=access, by=owner, name=name)
    page = owner_client.get(f"/p/alpha/buckets/LOCAL/{name}/delete/").content.decode()
    assert "leaves the bucket and its objects untouched" in page
    assert owner_client.post(f"/p/alpha/buckets/LOCAL/{name}/delete/", {}).status_code == 302
    assert objects.bucket_exists(datastore, bucket=name)


def test_missing_object_and_down_store_show_an_error_page(
    bucket: Bucket, owner_client: Client, settings: Any
) -> None:
    missing = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/download/", {"key": "no"})
    assert missing.status_code == 404
    assert owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/download/").status_code == 400
    settings.S3_ENDPOINT_URL = "http://127.0.0.1:9"
    clear_client_cache()
    down = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/")
    assert down.status_code == 503
    assert "did not answer" in down.content.decode()


def test_a_bucket_of_another_project_is_404(bucket: Bucket, outsider_client: Client) -> None:
    assert outsider_client.get(f"/p/beta/buckets/LOCAL/{bucket.name}/").status_code == 404


def test_the_list_says_when_it_counted_and_recounts_on_request(
    bucket: Bucket,
    datastore: DatastoreConfig,
    owner_client: Client,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    Bucket.objects.filter(pk=bucket.pk).update(stats_at=timezone.now() - timedelta(minutes=3))
    listed = owner_client.get("/p/alpha/buckets/").content.decode()
    assert ">3\xa0minutes ago</time>" in listed and 'data-testid="recount"' in listed
    objects.put_object(datastore, bucket=bucket.name, key="written/by/a/job", data=b"12345")
    url = f"/p/alpha/buckets/LOCAL/{bucket.name}/recount/"
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        row = owner_client.post(url, **HTMX).content.decode()
    assert len(callbacks) == 1
    # The answer says a count is coming and polls for one newer than the request.
    assert "counting again…" in row and 'hx-trigger="every 2s,' in row
    since = re.search(r'row/\?since=([0-9.]+)"', row)
    assert since is not None
    polled = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/row/?since={since[1]}")
    counted = polled.content.decode()
    assert ">1</td>" in counted and ">just now</time>" in counted
    assert "hx-trigger" not in counted


def test_a_recount_without_javascript_goes_back_to_the_list(
    bucket: Bucket, owner_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    url = f"/p/alpha/buckets/LOCAL/{bucket.name}/recount/"
    assert owner_client.get(url).status_code == 405
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = owner_client.post(url)
    assert response.status_code == 302 and response["Location"] == "/p/alpha/buckets/"
    assert len(callbacks) == 1


def test_a_recount_of_another_projects_bucket_is_404(
    bucket: Bucket, outsider_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = outsider_client.post(f"/p/alpha/buckets/LOCAL/{bucket.name}/recount/")
    assert response.status_code == 404 and callbacks == []
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = outsider_client.post(f"/p/beta/buckets/LOCAL/{bucket.name}/recount/")
    assert response.status_code == 404 and callbacks == []


def test_a_row_stops_waiting_for_a_recount_that_never_came(
    bucket: Bucket, owner_client: Client
) -> None:
    old = (timezone.now() - timedelta(minutes=10)).timestamp()
    row = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/row/?since={old}")
    assert "hx-trigger" not in row.content.decode()
    for junk in ("nan", "inf", "soon"):
        row = owner_client.get(f"/p/alpha/buckets/LOCAL/{bucket.name}/row/?since={junk}")
        assert row.status_code == 200 and "hx-trigger" not in row.content.decode()


def test_a_finished_job_recounts_the_buckets_it_wrote_to(
    bucket: Bucket,
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from controlpanel.engine.tasks import job_finalize
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.states import JobState

    read_only = services.bucket_create(access=access, by=owner, name=f"{bucket.name}-ro")
    for each in (bucket, read_only):
        objects.put_object(datastore, bucket=each.name, key="out/adapter.bin", data=b"123")
    job = Job.objects.create(
        project=access.project,
        owner=owner,
        name="tune",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=JobState.DONE,
        logs_archived=True,
        volumes=[
            f"{read_only.name}@LOCAL/data:/workspace/data:ro",
            f"{bucket.name}@LOCAL/out:/workspace/output:rw",
        ],
    )
    with django_capture_on_commit_callbacks(execute=True):
        job_finalize(str(job.pk), job.run)
    bucket.refresh_from_db()
    read_only.refresh_from_db()
    assert (bucket.object_count, bucket.total_size) == (1, 3)
    assert read_only.object_count == 0  # a read-only volume changed nothing: not recounted
