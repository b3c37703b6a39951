"""Each notebook's and app's own host under USER_CONTENT_DOMAIN, named from its id alone
(`nb-<32 hex>.<domain>`): stable across stops and starts, a valid DNS label, and covered by one
wildcard certificate and one wildcard DNS record (`*.<domain>`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings

from controlpanel.usercontent.domain import LABEL, ContentDomain


@dataclass(frozen=True)
class ContentHost:
    """One workload's host: the kind's prefix (`nb`, `app`) and the workload's id."""

    prefix: str
    workload_id: uuid.UUID

    @property
    def label(self) -> str:
        return f"{self.prefix}-{self.workload_id.hex}"

    @property
    def netloc(self) -> str:
        """The host (and port, when it is not the scheme's) a browser addresses."""
        return domain().netloc(self.label)

    @property
    def origin(self) -> str:
        return f"{scheme()}://{self.netloc}"


def domain() -> ContentDomain:
    """USER_CONTENT_DOMAIN, read when asked (tests change it); settings.py refused bad ones."""
    configured: ContentDomain | None = settings.USER_CONTENT_DOMAIN
    if configured is None:
        raise LookupError("USER_CONTENT_DOMAIN is not set: notebooks and apps cannot be served")
    return configured


def configured() -> bool:
    return settings.USER_CONTENT_DOMAIN is not None


def scheme() -> str:
    return "https" if settings.HTTPS else "http"


def content_host(prefix: str, workload_id: uuid.UUID | str) -> ContentHost:
    return ContentHost(prefix=prefix, workload_id=uuid.UUID(str(workload_id)))


def parse_host(header: str) -> ContentHost | None:
    """The workload a Host header names, or None: exactly `<prefix>-<32 hex>.<domain>`, with
    the domain's port or none. Anything else (another level of subdomain, upper-case hex, a
    trailing dot) is no workload's host."""
    if settings.USER_CONTENT_DOMAIN is None:
        return None
    parent = domain()
    name, _, port = header.strip().lower().partition(":")
    if port and (not port.isdigit() or (parent.port is not None and int(port) != parent.port)):
        return None
    label, dot, rest = name.partition(".")
    if not dot or rest != parent.host or not LABEL.match(label):
        return None
    prefix, _, hexid = label.rpartition("-")
    if not prefix or len(hexid) != 32 or any(c not in "0123456789abcdef" for c in hexid):
        return None
    return ContentHost(prefix=prefix, workload_id=uuid.UUID(hex=hexid))


def is_content_host(header: str) -> bool:
    """Whether the Host header lies under USER_CONTENT_DOMAIN at all (a workload's or not):
    such a request is user content's, never the panel's."""
    if settings.USER_CONTENT_DOMAIN is None:
        return False
    name = header.strip().lower().partition(":")[0].rstrip(".")
    return name.endswith("." + domain().host)
