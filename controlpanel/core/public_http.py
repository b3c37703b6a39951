"""HTTP requests to addresses users typed (project webhooks), kept off the panel's own networks.

A URL's host is resolved once; every address it resolves to must be public (not loopback,
link-local, private, shared, multicast, reserved or unspecified) and outside
`WEBHOOK_DENY_CIDRS` (the cluster's pod and service ranges, when they are public), unless
`WEBHOOK_ALLOW_CIDRS` lists it (an admin's receiver on a private network; the deny list still
wins). The request then goes to that vetted address, with the URL's name in `Host` and in the
TLS handshake (SNI and certificate check), so a DNS answer that changes between the check and
the connection (rebinding) reaches nothing new. Redirects are not followed and proxies from
the environment are not used: either would connect somewhere unvetted.

A request has one deadline for all of it, the name's lookup included: httpx's timeouts are per
read, so a receiver that trickles a byte every few seconds would otherwise hold the worker
forever.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import httpcore
import httpx
from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
T = TypeVar("T")
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


class Deadline:
    """A point in time a whole request must end by; each step waits at most until then."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def cap(self, timeout: float | None, error: type[Exception]) -> float:
        """`timeout` shortened to what is left; raises `error` once nothing is."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise error(f"no complete answer within the {self.seconds:g} s deadline")
        return left if timeout is None else min(timeout, left)

    @contextmanager
    def step(self, timeout: float | None, error: type[Exception]) -> Iterator[float]:
        """The step's capped timeout; a step cut short by the deadline says so."""
        capped = self.cap(timeout, error)
        try:
            yield capped
        except error:
            self.cap(None, error)
            raise


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with self._deadline.step(timeout, httpcore.ReadTimeout) as capped:
            return self._stream.read(max_bytes, capped)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with self._deadline.step(timeout, httpcore.WriteTimeout) as capped:
            self._stream.write(buffer, capped)

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        with self._deadline.step(timeout, httpcore.ConnectTimeout) as capped:
            tls = self._stream.start_tls(ssl_context, server_hostname, capped)
        return _DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, every connect, read and write capped by one deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self._backend, self._deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        with self._deadline.step(timeout, httpcore.ConnectTimeout) as capped:
            stream = self._backend.connect_tcp(host, port, capped, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)


class _DeadlineTransport(httpx.HTTPTransport):
    def __init__(self, *, verify: ssl.SSLContext | bool, deadline: Deadline) -> None:
        super().__init__(verify=verify, trust_env=False)
        # httpx takes no network backend: its pool is made again, the same but for that.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            network_backend=_DeadlineBackend(deadline),
        )


def _before(deadline: Deadline, call: Callable[[], T]) -> T:
    """`call()` in a thread, waited for until the deadline: getaddrinfo takes no timeout (a
    resolver that does not answer is left behind, and ends on its own)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller below
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="public-http-resolve", daemon=True)
    thread.start()
    thread.join(deadline.cap(None, httpx.ConnectTimeout))
    if not outcome:
        raise httpx.ConnectTimeout(f"no address within the {deadline.seconds:g} s deadline")
    done, value = outcome[0]
    if not done:
        raise value
    return value


def post(
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    timeout: float,
    verify: ssl.SSLContext | bool = True,
) -> httpx.Response:
    """POST to the vetted address of `url`'s host; raises AddressRefused before connecting.
    `timeout` is the deadline of the whole request: lookup, connection, sending, answer."""
    deadline = Deadline(timeout)
    parsed = httpx.URL(url)
    host = _ascii_host(parsed)
    port = parsed.port or _default_port(parsed.scheme)
    address = _before(deadline, lambda: vetted_addresses(host, port))[0]
    target = parsed.copy_with(host=str(address))
    extensions = {"sni_hostname": host} if parsed.scheme == "https" else {}
    transport = _DeadlineTransport(verify=verify, deadline=deadline)
    with httpx.Client(
        transport=transport, timeout=timeout, trust_env=False, follow_redirects=False
    ) as client:
        return client.post(
            target,
            content=content,
            headers={**headers, "Host": parsed.netloc.decode("ascii")},
            extensions=extensions,
        )
