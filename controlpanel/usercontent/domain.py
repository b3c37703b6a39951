"""USER_CONTENT_DOMAIN as settings.py reads it, and how it stands towards the panel's hosts.
Plain functions with no Django import: settings.py calls them while it loads."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

# One DNS label (RFC 1123), lower case: what every part of the domain, and every workload's
# own label (`nb-<32 hex>`), must be.
LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# Room left for the longest workload label (`app-` and 32 hex) and its dot in a 253-byte name.
MAX_DOMAIN = 253 - 37


@dataclass(frozen=True)
class ContentDomain:
    """The parent of every notebook's and app's host; `port` when it is not the scheme's."""

    host: str
    port: int | None = None

    def netloc(self, label: str) -> str:
        """`label.host[:port]`: what a browser's address bar shows for one workload."""
        name = f"{label}.{self.host}"
        return f"{name}:{self.port}" if self.port else name

    def __str__(self) -> str:
        return f"{self.host}:{self.port}" if self.port else self.host


def parse_content_domain(value: str) -> ContentDomain:
    """`usercontent.example.com` or `localhost:8000`, or ValueError saying what is wrong."""
    text = value.strip().lower().rstrip(".")
    if "://" in text or "/" in text:
        raise ValueError(
            f"{value!r}: a domain name such as usercontent.example.com, no scheme or path"
        )
    if text.startswith("*."):
        raise ValueError(f"{value!r}: name the domain itself, without '*.'")
    host, _, port_text = text.partition(":")
    port = _port(value, port_text) if port_text else None
    if _is_address(host):
        raise ValueError(f"{value!r}: an IP address has no subdomains; name a domain")
    labels = host.split(".")
    if not host or len(host) > MAX_DOMAIN or not all(LABEL.match(label) for label in labels):
        raise ValueError(
            f"{value!r}: not a DNS name (labels of a-z, 0-9 and '-', at most {MAX_DOMAIN} "
            "characters in all)"
        )
    return ContentDomain(host=host, port=port)


def _port(value: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return int(text)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def within(name: str, parent: str) -> bool:
    """Whether `name` is `parent` or one of its subdomains."""
    return name == parent or name.endswith("." + parent)


def cookie_overlap(*, panel_host: str, content: ContentDomain) -> str:
    """Why the panel's host and the content domain could share cookies (empty: they cannot).

    The same host, or one a subdomain of the other: a notebook's server at
    `nb-x.<content>` could then set a cookie for a domain the panel's host lies in (cookie
    tossing: a planted `csrftoken` or session), or would be sent one that the panel set for
    its parent. An IP address shares no cookie with a domain name."""
    panel = panel_host.strip().lower().rstrip(".").strip("[]")
    if not panel or _is_address(panel) or panel == "*":
        return ""
    if panel == content.host:
        return f"USER_CONTENT_DOMAIN is the panel's own host ({panel})"
    if within(panel, content.host):
        return f"the panel's host {panel} lies inside USER_CONTENT_DOMAIN ({content.host})"
    if within(content.host, panel):
        return f"USER_CONTENT_DOMAIN ({content.host}) lies inside the panel's host {panel}"
    return ""
