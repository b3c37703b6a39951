"""HTTP requests to addresses users typed (project webhooks), kept off the panel's own networks.

A URL's host is resolved once; every address it resolves to must be public (not loopback,
link-local, private, shared, multicast, reserved or unspecified) and outside
`WEBHOOK_DENY_CIDRS` (the cluster's pod and service ranges, when they are public), unless
`WEBHOOK_ALLOW_CIDRS` lists it (an admin's receiver on a private network; the deny list still
wins). The request then goes to that vetted address, with the URL's name in `Host` and in the
TLS handshake (SNI and certificate check), so a DNS answer that changes between the check and
the connection (rebinding) reaches nothing new. Redirects are not followed and proxies from
the environment are not used: either would connect somewhere unvetted.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx
from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# getaddrinfo, replaceable in tests that need a name to resolve to a chosen address.
resolve: Callable[..., list[Any]] = socket.getaddrinfo


class AddressRefused(ValueError):
    """The URL's host is, or resolves to, an address webhooks may not reach."""


def _networks(cidrs: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(cidr, strict=False) for cidr in cidrs]


_KINDS = (
    ("loopback", "a loopback address"),
    ("link_local", "a link-local address"),
    ("multicast", "a multicast address"),
    ("unspecified", "an unspecified address"),
    ("private", "a private address"),
    ("reserved", "a reserved address"),
)


def refusal(address: Address) -> str | None:
    """Why `address` may not be reached, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in _networks(settings.WEBHOOK_DENY_CIDRS)):
        return "in WEBHOOK_DENY_CIDRS (the cluster's own ranges)"
    if any(address in network for network in _networks(settings.WEBHOOK_ALLOW_CIDRS)):
        return None
    for kind, phrase in _KINDS:
        if getattr(address, f"is_{kind}"):
            return phrase
    if not address.is_global:
        return "not a public address"
    return None


def _refused(host: str, address: Address, why: str, *, literal: bool) -> AddressRefused:
    named = host if literal else f"{host} resolves to {address},"
    return AddressRefused(
        f"{named} {why}: webhooks reach public addresses only (an admin can allow a private "
        "range with WEBHOOK_ALLOW_CIDRS)."
    )


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def vetted_addresses(host: str, port: int) -> list[Address]:
    """Every address `host` stands for, each checked; raises AddressRefused on the first that
    may not be reached, OSError when the name does not resolve."""
    literal = _literal(host)
    if literal is not None:
        found = [literal]
    else:
        infos = resolve(host, port, type=socket.SOCK_STREAM)
        found = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    for address in found:
        why = refusal(address)
        if why:
            raise _refused(host, address, why, literal=literal is not None)
    return found


def check_url_host(url: str) -> None:
    """At save time: refuse a host that is, or now resolves to, a refused address. A name that
    does not resolve yet passes (it is checked again, and enforced, at every send)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return  # the URL's own validation says what is wrong
    try:
        vetted_addresses(_ascii_host(parsed), parsed.port or _default_port(parsed.scheme))
    except AddressRefused:
        raise
    except (OSError, UnicodeError):
        return


def _ascii_host(url: httpx.URL) -> str:
    """The host as DNS and TLS know it (IDNA), without an IPv6 literal's brackets."""
    return url.raw_host.decode("ascii").strip("[]")


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def post(
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    timeout: float,
    verify: ssl.SSLContext | bool = True,
) -> httpx.Response:
    """POST to the vetted address of `url`'s host; raises AddressRefused before connecting."""
    parsed = httpx.URL(url)
    host = _ascii_host(parsed)
    address = vetted_addresses(host, parsed.port or _default_port(parsed.scheme))[0]
    target = parsed.copy_with(host=str(address))
    extensions = {"sni_hostname": host} if parsed.scheme == "https" else {}
    with httpx.Client(
        timeout=timeout, verify=verify, trust_env=False, follow_redirects=False
    ) as client:
        return client.post(
            target,
            content=content,
            headers={**headers, "Host": parsed.netloc.decode("ascii")},
            extensions=extensions,
        )
