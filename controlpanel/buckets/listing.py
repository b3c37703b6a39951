"""The object browser's view of one listing page: folders first, sort within the page,
breadcrumbs and the links to the next, previous and first pages (continuation tokens, not
offsets, so a 100k-object folder pages as fast as a small one).

S3 lists forward only, in key order. "Previous" works from the tokens of the pages before
this one, carried in the query string (`back`, oldest first, page 1's absent token left out)
and trimmed to MAX_BACK_CHARS: past that, only the first page is linked."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlencode

from django.http import QueryDict

from controlpanel.buckets import selectors
from controlpanel.buckets.models import Bucket
from controlpanel.buckets.transfers import key_problem
from storage.objects import ObjectInfo

PAGE_SIZE = 100
MAX_BACK_CHARS = 4000  # the tokens kept for "previous page" (URLs stay well under 8 KB)
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
    def problem(self) -> str | None:
        """Why this object gets no download link (see transfers.key_problem), or None."""
        return key_problem(self.key) if self.info is not None else None

    @property
    def downloadable(self) -> bool:
        return self.problem is None


Param = str | int | list[str] | None


@dataclass
class Listing:
    prefix: str
    query: str
    sort: str
    page: int
    token: str | None = None
    back: list[str] = field(default_factory=list)
    folders: list[Entry] = field(default_factory=list)
    files: list[Entry] = field(default_factory=list)
    next_query: str | None = None
    crumbs: list[Crumb] = field(default_factory=list)

    def link(self, **changes: Param) -> str:
        """The query string of this listing's first page with some parameters changed."""
        params: dict[str, Param] = {"prefix": self.prefix, "q": self.query, "sort": self.sort}
        params.update(changes)
        kept = {k: v for k, v in params.items() if v not in (None, "", [])}
        return "?" + urlencode(kept, doseq=True)

    @property
    def here(self) -> dict[str, Param]:
        """The parameters that say which page this is (kept when only the sort changes)."""
        if self.page == 1 or not self.token:
            return {}
        return {"token": self.token, "page": self.page, "back": self.back}

    @property
    def paged(self) -> bool:
        """More than one page: the sort then covers only the page shown."""
        return self.page > 1 or self.next_query is not None

    @property
    def previous_query(self) -> str | None:
        if self.page == 2:
            return self.link()
        if self.page > 2 and self.back:
            return self.link(token=self.back[-1], page=self.page - 1, back=self.back[:-1])
        return None  # page 1, or the chain was trimmed: the first page is linked

    def next_link(self, next_token: str) -> str:
        chain = [*self.back, self.token] if self.page > 1 and self.token else []
        return self.link(token=next_token, page=self.page + 1, back=_trimmed(chain))

    @property
    def sort_links(self) -> dict[str, str]:
        """Per column, the link that sorts this page by it (again: the other way round)."""
        links = {}
        for column, first in (("name", "name"), ("size", "-size"), ("modified", "-modified")):
            other = first[1:] if first.startswith("-") else "-" + first
            links[column] = self.link(sort=other if self.sort == first else first, **self.here)
        return links


def _trimmed(chain: list[str]) -> list[str]:
    """The newest tokens of `chain` that fit in MAX_BACK_CHARS."""
    kept: list[str] = []
    total = 0
    for token in reversed(chain):
        total += len(token)
        if total > MAX_BACK_CHARS:
            break
        kept.append(token)
    return kept[::-1]


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


def parse_back(params: QueryDict, page_number: int) -> list[str]:
    """The tokens of the pages before this one (at most one per page from page 2 on)."""
    back = [token for token in params.getlist("back") if token]
    return _trimmed(back[-max(0, page_number - 2) :] if page_number > 2 else [])


def build_listing(*, bucket: Bucket, params: QueryDict) -> Listing:
    """Fetch one page for the folder and filter in `params` and arrange it for the page."""
    prefix, query, sort, token, page_number = parse_params(params)
    page = selectors.object_page(
        bucket=bucket, prefix=prefix + query, token=token, page_size=PAGE_SIZE
    )
    listing = Listing(
        prefix=prefix,
        query=query,
        sort=sort,
        page=page_number,
        token=token,
        back=parse_back(params, page_number),
        crumbs=breadcrumbs(prefix),
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
        listing.next_query = listing.next_link(page.next_token)
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
