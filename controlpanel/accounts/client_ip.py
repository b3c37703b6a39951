"""The client's address for log-in throttling behind a proxy (`BEHIND_PROXY=1`).

Each proxy appends the address it received the connection from to `X-Forwarded-For`, so with
`AXES_TRUSTED_PROXY_COUNT` proxies in front the client is that many entries from the right; what is
left of it was sent by the client and may be anything. Without the header (a request that
did not come through the proxies), or with a malformed entry, the TCP peer's address counts.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str | None:
    peer = request.META.get("REMOTE_ADDR")
    header = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hops = [hop.strip() for hop in header.split(",")] if header.strip() else []
    count = settings.AXES_TRUSTED_PROXY_COUNT
    if len(hops) < count:
        return peer
    candidate = hops[-count]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return peer
