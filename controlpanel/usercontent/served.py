"""What a kind that serves user content declares, in `<its package>/usercontent.py` as `SERVED`
(found through controlpanel/kinds.py, so nothing here names a kind: DESIGN.md rule 16).

A kind answers four questions; the gate (gate.py) asks them in this order for every request:
which workload a host names (`find`), whether this visitor may reach it (`admits`), where its
server listens now (`target`), and where Open lands (`landing`)."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Protocol
from urllib.parse import urlsplit

from django.conf import settings

from controlpanel.kinds import KINDS


@dataclass(frozen=True)
class Target:
    """Where a serving workload's server listens (`host:port`, on the cluster or on loopback),
    the `Authorization` header its server gets instead of the caller's ("": none), and what
    the gateway counts each request it lets through under (`<namespace>/<service>`, "": not
    counted; the panel's /_ajuste/count, views.gateway_count)."""

    address: str
    authorization: str = ""
    count: str = ""


class Served(Protocol):
    """One kind's user content. `prefix` starts its hosts' label (`nb-<id>`); `browser`: its
    visitors are people in a browser (a 401 sends them to the panel to sign in), else API
    clients (a 401 is theirs to read); `cacheable`: the gateway may keep a yes for a few
    seconds (USER_CONTENT_CACHE_SECONDS), keyed by the host and the caller's credentials."""

    kind: str
    prefix: str
    noun: str
    browser: bool
    cacheable: bool

    def find(self, workload_id: uuid.UUID) -> Any | None: ...

    def admits(self, workload: Any, *, user: Any | None, authorization: str) -> tuple[int, str]:
        """(200, "") when this visitor may reach the workload, else 401 or 403 and why.
        `user` is the one the content cookie names (None: no valid cookie); `authorization`
        the request's own header (an API token), never forwarded."""
        ...

    def target(self, workload: Any) -> Target | None:
        """Where its server answers now; None when it is not serving."""
        ...

    def landing(self, workload: Any) -> str:
        """The path Open lands on."""
        ...


# A kind may also count what the panel's own proxy forwarded (`make run`):
#   def record(self, workload_id: uuid.UUID, *, status: int, seconds: float) -> None


class Content:
    """What every kind's `Served` shares, declared in its class line
    (`class NotebookContent(Content, model=Notebook, kind="notebook", prefix="nb",
    browser=True)`): `find` reads the kind's `model` (with its project), the gateway may
    cache a yes, and `noun` is the kind unless a kind says otherwise."""

    model: Any
    kind: str
    prefix: str
    noun: str
    browser: bool
    cacheable = True

    def __init_subclass__(
        cls, *, model: Any, kind: str, prefix: str, browser: bool, noun: str = "", **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.model, cls.kind, cls.prefix, cls.browser = model, kind, prefix, browser
        cls.noun = noun or kind

    def find(self, workload_id: uuid.UUID) -> Any | None:
        rows = self.model.objects.select_related("project")
        return rows.filter(pk=workload_id).first()


@functools.cache
def _all() -> dict[str, Served]:
    found: dict[str, Served] = {}
    for package in KINDS.values():
        try:
            module = import_module(f"{package}.usercontent")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.usercontent":
                raise
            continue
        served: Served = module.SERVED
        if served.prefix in found:
            raise ValueError(f"two kinds serve user content under the prefix {served.prefix!r}")
        found[served.prefix] = served
    return found


def by_prefix(prefix: str) -> Served | None:
    return _all().get(prefix)


def by_kind(kind: str) -> Served | None:
    return next((served for served in _all().values() if served.kind == kind), None)


def every() -> list[Served]:
    return list(_all().values())


def cluster_address(*, service: str, namespace: str, port: int) -> str:
    """A Service's `host:port` inside the cluster, as APP_SERVICE_URL spells Services."""
    url = settings.APP_SERVICE_URL.format(service=service, namespace=namespace, port=port)
    return urlsplit(url).netloc


def loopback_address(url: str) -> str | None:
    """`127.0.0.1:<port>` of a local server's URL; None for anything else (the local
    backend's servers listen there and nowhere else: nothing else is proxied)."""
    parts = urlsplit(url or "")
    if parts.scheme != "http" or parts.hostname != "127.0.0.1" or not parts.port:
        return None
    return f"127.0.0.1:{parts.port}"
