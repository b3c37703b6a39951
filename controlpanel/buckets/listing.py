"""The object browser's view of one listing page: folders first, sort within the page,
breadcrumbs and the links to the next and first pages (continuation tokens, not offsets,
so a 100k-object folder pages as fast as a small one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlencode

from django.http import QueryDict

from controlpanel.buckets import selectors
from controlpanel.buckets.models import Bucket
from controlpanel.buckets.transfers import has_dot_segment
from storage.objects import ObjectInfo

PAGE_SIZE = 100
SORTS = ("name", "-name", "size", "-size", "modified", "-modified")
_EPOCH = datetime.min


@dataclass(frozen=True)
class Crumb:
    label: str
    prefix: str


@dataclass(frozen=True)
class Entry:
    """A folder (info is None) or an object, with its name relative to the folder shown."""

    name: str
    key: str
    info: ObjectInfo | None = None

    @property
    def downloadable(self) -> bool:
        return not has_dot_segment(self.key)


@dataclass
class Listing:
    prefix: str
    query: str
    sort: str
    page: int
    folders: list[Entry] = field(default_factory=list)
    files: list[Entry] = field(default_factory=list)
    next_query: str | None = None
    crumbs: list[Crumb] = field(default_factory=list)

    def link(self, **changes: str | int | None) -> str:
        """The query string of this listing with some parameters changed."""
        params: dict[str, str | int | None] = {
            "prefix": self.prefix,
            "q": self.query,
            "sort": self.sort,
        }
        params.update(changes)
        return "?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})

    @property
    def sort_links(self) -> dict[str, str]:
        """Per column, the link that sorts by it (again: the other way round)."""
        links = {}
        for column, first in (("name", "name"), ("size", "-size"), ("modified", "-modified")):
            other = first[1:] if first.startswith("-") else "-" + first
            links[column] = self.link(sort=other if self.sort == first else first)
        return links


def parse_params(params: QueryDict) -> tuple[str, str, str, str | None, int]:
    prefix = params.get("prefix", "")
    query = params.get("q", "")
    sort = params.get("sort", "name")
    page = params.get("page", "1")
    return (
        prefix,
        query,
        sort if sort in SORTS else "name",
        params.get("token") or None,
        int(page) if page.isdigit() and 0 < int(page) < 10**7 else 1,
    )


def build_listing(*, bucket: Bucket, params: QueryDict) -> Listing:
    """Fetch one page for the folder and filter in `params` and arrange it for the page."""
    prefix, query, sort, token, page_number = parse_params(params)
    page = selectors.object_page(
        bucket=bucket, prefix=prefix + query, token=token, page_size=PAGE_SIZE
    )
    listing = Listing(
        prefix=prefix, query=query, sort=sort, page=page_number, crumbs=breadcrumbs(prefix)
    )
    listing.folders = sorted(
        (Entry(name=p[len(prefix) :], key=p) for p in page.prefixes),
        key=lambda entry: entry.name,
        reverse=sort == "-name",
    )
    # A zero-byte `folder/` marker is the folder itself, not a file in it.
    files = [
        Entry(name=o.key[len(prefix) :], key=o.key, info=o) for o in page.objects if o.key != prefix
    ]
    listing.files = _sorted(files, sort)
    if page.next_token:
        listing.next_query = listing.link(token=page.next_token, page=page_number + 1)
    return listing


def _sorted(files: list[Entry], sort: str) -> list[Entry]:
    field_name = sort.lstrip("-")
    if field_name == "size":
        files.sort(key=lambda e: e.info.size if e.info else 0)
    elif field_name == "modified":
        files.sort(key=lambda e: e.info.last_modified.replace(tzinfo=None) if e.info else _EPOCH)
    else:
        files.sort(key=lambda e: e.name)
    if sort.startswith("-"):
        files.reverse()
    return files


def breadcrumbs(prefix: str) -> list[Crumb]:
    """One crumb per folder level of `prefix` (an empty segment, as in `a//b`, shows as '∅')."""
    crumbs: list[Crumb] = []
    if not prefix:
        return crumbs
    segments = prefix.split("/")
    trailing = prefix.endswith("/")
    if trailing:
        segments = segments[:-1]
    for index, segment in enumerate(segments):
        path = "/".join(segments[: index + 1])
        if trailing or index < len(segments) - 1:
            path += "/"
        crumbs.append(Crumb(label=segment or "∅", prefix=path))
    return crumbs
