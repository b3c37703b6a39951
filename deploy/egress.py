"""What a project's pods may reach: the cluster's DNS (`KUBERNETES_DNS`, and a node-local
cache at `KUBERNETES_NODE_LOCAL_DNS`), the endpoints of its datastores (derived from their
URLs) and the extra destinations an admin lists (`KUBERNETES_EGRESS`).

A project namespace denies all egress by default, so without these rules the volume pulls and
pushes could not reach S3. DNS goes only to the resolvers named: port 53 to any address would
be a tunnel out. An endpoint's host decides the rule:
- an IP address: that address only (`/32` or `/128`), on the URL's port;
- a Service name (`minio.storage.svc` or `minio.storage.svc.cluster.local`): pods of that
  namespace, on the URL's port (write the `.svc` form: `minio.storage` looks like a public
  host name);
- any other host name: NetworkPolicies cannot name hosts, so any public address on the URL's
  port (443 for https). List narrower CIDRs in `KUBERNETES_EGRESS` and set
  `KUBERNETES_EGRESS_FROM_DATASTORES=0` to replace that.

Every wide address rule (one that contains them) leaves out loopback, link-local (the cloud
metadata address 169.254.169.254 among them), the private and shared ranges and their IPv6
counterparts (`BLOCKED_RANGES`), except what `KUBERNETES_EGRESS_ALLOW_PRIVATE` lists. A rule
that lies inside one of them (an admin's `10.20.0.0/16`, a datastore at `10.1.2.3`) names its
destination precisely and is kept as it is.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from deploy.types import EgressRule

ANYWHERE_V4 = "0.0.0.0/0"
BLOCKED_RANGES = (
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def egress_for_endpoint(url: str) -> EgressRule:
    """The rule that lets pods reach one datastore endpoint."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        labels = host.split(".")
        if len(labels) >= 3 and labels[2] == "svc":
            return EgressRule(namespace=labels[1], ports=(port,))
        return EgressRule(cidr=ANYWHERE_V4, ports=(port,))
    return EgressRule(cidr=f"{address}/{address.max_prefixlen}", ports=(port,))


def parse_egress(text: str) -> tuple[EgressRule, ...]:
    """`KUBERNETES_EGRESS`: comma-separated `CIDR[:PORT]` or `namespace/NAME[:PORT]`.

    Raises ValueError naming the entry that is wrong."""
    rules = []
    for entry in (e.strip() for e in text.split(",")):
        if entry:
            rules.append(_parse_entry(entry))
    return tuple(rules)


def _parse_entry(entry: str) -> EgressRule:
    target, port = entry, None
    if entry.count(":") == 1 or (entry.startswith("namespace/") and ":" in entry):
        target, _, port_text = entry.rpartition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
        port = int(port_text)
    ports = (port,) if port else ()
    if target.startswith("namespace/"):
        namespace = target.removeprefix("namespace/")
        if not namespace or not all(c.isalnum() or c == "-" for c in namespace):
            raise ValueError(f"{entry!r}: write namespace/NAME with a Kubernetes namespace name")
        return EgressRule(namespace=namespace, ports=ports)
    try:
        network = ipaddress.ip_network(target, strict=False)
    except ValueError:
        raise ValueError(
            f"{entry!r}: write an address block (10.0.0.0/8, 192.0.2.7) or namespace/NAME,"
            " optionally followed by :PORT"
        ) from None
    return EgressRule(cidr=str(network), ports=ports)


def excluded_ranges(cidr: str, allowed: Iterable[str] = ()) -> list[str]:
    """The `except` list of an ipBlock for `cidr`: each blocked range strictly inside it, less
    the private ranges an admin allows (`KUBERNETES_EGRESS_ALLOW_PRIVATE`)."""
    network = ipaddress.ip_network(cidr)
    allow = [ipaddress.ip_network(text) for text in allowed]
    excluded: list[str] = []
    for text in BLOCKED_RANGES:
        blocked = ipaddress.ip_network(text)
        if blocked.version != network.version or blocked == network:
            continue
        if blocked.subnet_of(network):  # type: ignore[arg-type]
            excluded += [str(piece) for piece in _less(blocked, allow)]
    return excluded


def _less(blocked: Network, allow: list[Network]) -> list[Network]:
    pieces = [blocked]
    for allowed in (a for a in allow if a.version == blocked.version):
        kept: list[Network] = []
        for piece in pieces:
            if piece.subnet_of(allowed):  # type: ignore[arg-type]
                continue
            if allowed.subnet_of(piece):  # type: ignore[arg-type]
                kept += piece.address_exclude(allowed)  # type: ignore[arg-type]
            else:
                kept.append(piece)
        pieces = kept
    return sorted(pieces)  # type: ignore[type-var]


def parse_dns(text: str) -> tuple[EgressRule, ...]:
    """`KUBERNETES_DNS`: comma-separated resolvers, each `NAMESPACE/LABEL=VALUE` (the DNS pods),
    `NAMESPACE` (every pod there) or an address block. Raises ValueError naming the entry."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ValueError("name the cluster's DNS, e.g. kube-system/k8s-app=kube-dns")
    return tuple(_dns_entry(entry) for entry in entries)


def _dns_entry(entry: str) -> EgressRule:
    namespace, _, selector = entry.partition("/")
    if not selector or "=" in selector:
        key, _, value = selector.partition("=")
        if _is_name(namespace) and (not selector or (key and _is_label(key, value))):
            return EgressRule(namespace=namespace, pod_labels={key: value} if key else {})
    try:
        return EgressRule(cidr=str(ipaddress.ip_network(entry, strict=False)))
    except ValueError:
        raise ValueError(
            f"{entry!r}: write NAMESPACE/LABEL=VALUE (kube-system/k8s-app=kube-dns),"
            " NAMESPACE, or an address block"
        ) from None


def parse_node_local_dns(text: str) -> tuple[EgressRule, ...]:
    """`KUBERNETES_NODE_LOCAL_DNS`: the address NodeLocal DNSCache answers on (169.254.20.10),
    or empty. Raises ValueError when it is not one IP address."""
    if not text.strip():
        return ()
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"{text.strip()!r}: write one IP address, e.g. 169.254.20.10") from None
    return (EgressRule(cidr=f"{address}/{address.max_prefixlen}"),)


def parse_cidrs(text: str) -> tuple[str, ...]:
    """`KUBERNETES_EGRESS_ALLOW_PRIVATE`: comma-separated address blocks (10.20.0.0/16).
    Raises ValueError naming the entry that is not one."""
    blocks = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        try:
            blocks.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            raise ValueError(f"{entry!r}: write an address block, e.g. 10.20.0.0/16") from None
    return tuple(blocks)


def _is_name(text: str) -> bool:
    return 0 < len(text) <= 63 and all(c.islower() or c.isdigit() or c == "-" for c in text)


def _is_label(key: str, value: str) -> bool:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")
    return set(key) <= allowed and set(value) <= allowed and len(value) <= 63
