"""What a project's pods may reach besides DNS: the endpoints of its datastores (derived from
their URLs) and the extra destinations an admin lists (`KUBERNETES_EGRESS`).

A project namespace denies all egress by default, so without these rules the volume pulls and
pushes could not reach S3. An endpoint's host decides the rule:
- an IP address: that address only (`/32` or `/128`), on the URL's port;
- a Service name (`minio.storage.svc` or `minio.storage.svc.cluster.local`): pods of that
  namespace, on the URL's port (write the `.svc` form: `minio.storage` looks like a public
  host name);
- any other host name: NetworkPolicies cannot name hosts, so any address on the URL's port
  (443 for https). List narrower CIDRs in `KUBERNETES_EGRESS` and set
  `KUBERNETES_EGRESS_FROM_DATASTORES=0` to replace that.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from deploy.types import EgressRule

ANYWHERE_V4 = "0.0.0.0/0"


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
