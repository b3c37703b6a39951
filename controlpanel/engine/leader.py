"""What must run once per install runs in the one replica that holds a Lease (issue 26): the
watch and the log collector (the watcher's `ajuste-watch`), the periodic tasks (beat's
`ajuste-sweep`: beat sends the sweep). A second replica, or the new pod of a rolling update
beside the old one (maxSurge 1), waits, renewing its claim, and takes over within the Lease's
duration once the holder stops renewing (killed, partitioned) or at once when it lets go.

`Leadership` renews on a thread of its own every `retry_s`; `leading()` is what the work
asks before it acts. On the Kubernetes backend with LEADER_ELECTION on, the Lease is a
`coordination.k8s.io/v1` Lease in the panel's namespace (deploy/kubernetes/lease.py); with
the local backend (one process of each under `make run`) a replica always leads."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING

from django.conf import settings

from controlpanel.core.install import install_id
from controlpanel.engine.backend import get_backend

if TYPE_CHECKING:
    from deploy.kubernetes.lease import LeaseLock

log = logging.getLogger(__name__)
# The Leases (deploy/kubernetes/lease.py names them too; that module loads the Kubernetes
# client, which the local backend never needs).
SWEEP_LEASE = "ajuste-sweep"  # beat, which sends the sweep and the other periodic tasks
WATCH_LEASE = "ajuste-watch"  # the watcher: the watch and the log collector


class Leadership:
    """One contender for one Lease (`lock`), or none: then it always leads."""

    def __init__(self, lock: LeaseLock | None, *, retry_s: float) -> None:
        self.lock = lock
        self.retry_s = retry_s
        self._thread: threading.Thread | None = None

    def leading(self) -> bool:
        return self.lock is None or self.lock.leading()

    def renew(self) -> bool:
        """One attempt to take or keep the Lease; whether this contender leads after it."""
        return self.lock is None or self.lock.try_acquire_or_renew()

    def start(self, stop: threading.Event) -> None:
        """Renew every `retry_s` on a thread until `stop`, then let the Lease go."""
        if self.lock is None:
            return
        self._thread = threading.Thread(target=self._run, args=(stop,), name="lease", daemon=True)
        self._thread.start()

    def wait_leading(self, stop: threading.Event) -> bool:
        """Wait until this contender leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self.leading():
                return True
            stop.wait(self.retry_s)
        return False

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait for the renewing thread to let the Lease go (after `stop`)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self, stop: threading.Event) -> None:
        assert self.lock is not None
        while not stop.is_set():
            self.lock.try_acquire_or_renew()
            stop.wait(self.retry_s)
        if self.lock.release():
            log.info("lease %s let go by %s", self.lock.name, self.lock.identity)


def contender_identity() -> str:
    """The pod's name (HOSTNAME in a pod) and a random suffix: unique per process."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}-{uuid.uuid4().hex[:8]}"


def leadership(name: str) -> Leadership:
    """This process's contender for the Lease `name`, on this install's backend."""
    retry_s = max(settings.LEADER_LEASE_SECONDS / 7.5, 0.1)  # client-go's 15 s and 2 s
    api = getattr(get_backend(), "api", None) if settings.LEADER_ELECTION else None
    if api is None:
        return Leadership(None, retry_s=retry_s)
    from deploy.kubernetes.lease import LeaseLock  # the Kubernetes client: a heavy import

    lock = LeaseLock(
        api,
        namespace=settings.KUBERNETES_NAMESPACE,
        name=name,
        identity=contender_identity(),
        duration_s=settings.LEADER_LEASE_SECONDS,
        renew_deadline_s=settings.LEADER_LEASE_SECONDS * 2 / 3,
        install=install_id(),
    )
    return Leadership(lock, retry_s=retry_s)
