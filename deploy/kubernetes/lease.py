"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
what must run once (the sweep, the watch) runs in the replica holding the Lease.

Each contender calls `LeaseLock.try_acquire_or_renew()` every `retry_s` (a third of the
duration, or so) and acts only while `leading()` is true. Every write names the
resourceVersion it was decided on, so of two contenders racing for a free or expired Lease one
wins and the other gets 409 and stays a follower. A holder that stops renewing (killed, cut
off) loses the Lease `duration_s` after the last renewal a contender *saw*: expiry is measured
on each contender's own monotonic clock from the moment it observed the record change, never
from the holder's `renewTime`, so clocks that disagree between nodes hand nothing over early.
A holder that stops cleanly `release()`s it: the next contender takes it at its next try.

The holder itself stops `leading()` once `renew_deadline_s` (shorter than the duration) has
passed since its last successful renewal, before any contender may take over: two leaders
never act at once as long as the clocks run at the same rate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.types import TransientError

log = logging.getLogger(__name__)

KIND = "Lease"
API_VERSION = "coordination.k8s.io/v1"
# The Leases the panel's processes contend for, in the panel's own namespace.
SWEEP_LEASE = "ajuste-sweep"
WATCH_LEASE = "ajuste-watch"


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says: who holds it, for how long, since when."""

    holder: str
    duration_s: int
    transitions: int
    resource_version: str
    renew_time: str = ""

    @classmethod
    def of(cls, lease: Obj) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
            renew_time=str(spec.get("renewTime") or ""),
        )


class LeaseLock:
    """One contender (`identity`, unique per process: the pod name and a random suffix) for
    the Lease `namespace/name` (labelled with `install` when it makes it). Not thread-safe:
    one thread calls it."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        renew_deadline_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        install: str = "",
    ) -> None:
        if not 0 < renew_deadline_s < duration_s:
            raise ValueError("renew_deadline_s must be positive and shorter than duration_s")
        if not identity:
            raise ValueError("a contender needs an identity")
        self.api, self.namespace, self.name = api, namespace, name
        self.identity, self.duration_s, self.renew_deadline_s = (
            identity,
            duration_s,
            renew_deadline_s,
        )
        self.clock, self.install = clock, install
        self.observed: LeaseRecord | None = None
        self.observed_at = 0.0
        self.renewed_at: float | None = None

    def leading(self) -> bool:
        """Whether this contender may act as the leader now."""
        return (
            self.renewed_at is not None and self.clock() - self.renewed_at < self.renew_deadline_s
        )

    def try_acquire_or_renew(self) -> bool:
        """One attempt: take the Lease if it is free, expired or ours, renew it if ours.
        True when this contender holds it afterwards. Conflicts and API errors are a False
        (`leading()` runs out by itself if they last)."""
        now = self.clock()
        try:
            current = self._read()
            if current is None:
                return self._won(self._create(), now)
            self._observe(LeaseRecord.of(current), now)
            record = self.observed
            assert record is not None
            if record.holder not in ("", self.identity) and not self._expired(now):
                self.renewed_at = None
                return False
            return self._won(self._update(record), now)
        except ApiException as exc:
            if exc.status == 409:  # changed since read: another contender moved first
                self.renewed_at = None
                return False
            log.warning("lease %s/%s: HTTP %s", self.namespace, self.name, exc.status)
            return self._lost()
        except TransientError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return self._lost()

    def release(self) -> bool:
        """Give the Lease up (a clean stop): its holder becomes empty and its duration one
        second, so a contender takes it at once. False when it was not ours to release."""
        if self.observed is None or self.renewed_at is None:
            return False
        self.renewed_at = None
        try:
            self.api.patch(KIND, self.namespace, self.name, self._body(self.observed, holder=""))
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or taken meanwhile: not ours any more
                return False
            raise
        return True

    def _read(self) -> Obj | None:
        try:
            return self.api.read(KIND, self.namespace, self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _create(self) -> Obj:
        stamp = _micro_time()
        lease = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {names.MANAGED_BY: names.MANAGER, **names.install_labels(self.install)},
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_s,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        return self.api.create(lease)

    def _update(self, record: LeaseRecord) -> Obj:
        return self.api.patch(KIND, self.namespace, self.name, self._body(record, self.identity))

    def _body(self, record: LeaseRecord, holder: str) -> Obj:
        """The merge patch: conditional on the resourceVersion the decision was made on."""
        stamp = _micro_time()
        spec: Obj = {"holderIdentity": holder, "renewTime": stamp}
        spec["leaseDurationSeconds"] = self.duration_s if holder else 1
        if record.holder != holder:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = record.transitions + (1 if holder else 0)
        return {"metadata": {"resourceVersion": record.resource_version}, "spec": spec}

    def _observe(self, record: LeaseRecord, now: float) -> None:
        """Expiry counts from when this contender saw the record last change."""
        if record != self.observed:
            self.observed, self.observed_at = record, now

    def _expired(self, now: float) -> bool:
        record = self.observed
        return record is None or now - self.observed_at >= max(record.duration_s, 1)

    def _won(self, lease: Obj, now: float) -> bool:
        self.observed, self.observed_at = LeaseRecord.of(lease), now
        if self.renewed_at is None:
            log.info("lease %s/%s taken by %s", self.namespace, self.name, self.identity)
        self.renewed_at = now
        return True

    def _lost(self) -> bool:
        """A failed renewal: still leading until the renew deadline, as the others cannot
        take over before the duration."""
        if self.renewed_at is not None and not self.leading():
            log.warning("lease %s/%s lost by %s", self.namespace, self.name, self.identity)
            self.renewed_at = None
        return self.leading()


def _micro_time() -> str:
    """A MicroTime as the API server writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
