"""List, then watch our pods from the list's resourceVersion; relist on 410, on errors and on
a timer. Every (re)list yields every workload again, so the stream is level-triggered: a
consumer that missed events converges at the next relist. Pods outside Ajuste's project
namespaces are dropped whatever their labels say (`trust`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import urllib3
from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.listing import MANAGED, ref_of
from deploy.kubernetes.sweep import observe_everything
from deploy.kubernetes.trust import ProjectNamespaces
from deploy.types import ObservedWorkload, TransientError, WorkloadRef

log = logging.getLogger(__name__)

Observer = Callable[[WorkloadRef, Obj | None], ObservedWorkload]
MAX_BACKOFF_S = 30.0


def watch_workloads(
    api: KubeApi,
    *,
    stop: threading.Event,
    namespace: str | None,
    resync_s: float,
    watch_timeout_s: int,
    observe: Observer,
    install: str = "",
) -> Iterator[ObservedWorkload]:
    """Observations as pods change, until `stop` is set. `observe(ref, deleted_pod)` maps
    one run; `deleted_pod` is the last state of a pod that just went away. Given an
    `install`, another install's pods are left out of the relists and the events (a copy of
    production's database renewed as an install of its own must not record production's
    states into its rows)."""
    backoff = 0.5
    projects = ProjectNamespaces(api)
    while not stop.is_set():
        try:
            observations, version = observe_everything(api, namespace, projects, install=install)
            yield from observations
            watched = Watched(namespace, version, resync_s, watch_timeout_s, install)
            yield from _follow(api, stop, watched, observe, projects)
            backoff = 0.5
        except ApiException as exc:
            if exc.status == 410:
                log.info("watch expired (410 Gone); relisting")
                continue
            log.warning("watch failed (HTTP %s); relisting in %.1fs", exc.status, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
        except (TransientError, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("watch failed (%s); relisting in %.1fs", exc, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


@dataclass(frozen=True)
class Watched:
    """What one watch follows: where, from which version, for how long, whose pods."""

    namespace: str | None
    version: str
    resync_s: float
    timeout_s: int
    install: str


def _follow(
    api: KubeApi,
    stop: threading.Event,
    watched: Watched,
    observe: Observer,
    projects: ProjectNamespaces,
) -> Iterator[ObservedWorkload]:
    """Watch from `watched.version` until the resync timer fires; the server ends each stream
    after `timeout_s`, which is also how often `stop` is looked at when nothing happens."""
    deadline = time.monotonic() + watched.resync_s
    version = watched.version
    while not stop.is_set() and time.monotonic() < deadline:
        timeout = max(1, min(watched.timeout_s, int(deadline - time.monotonic()) or 1))
        events = api.watch(
            "Pod",
            watched.namespace,
            label_selector=MANAGED,
            resource_version=version,
            timeout_s=timeout,
        )
        for event in events:
            obj = event.get("object") or {}
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            ref = ref_of(obj) if event.get("type") != "BOOKMARK" else None
            if ref is not None and names.belongs(obj, watched.install) and projects.holds(ref):
                yield observe(ref, obj if event.get("type") == "DELETED" else None)
            if stop.is_set():
                return
