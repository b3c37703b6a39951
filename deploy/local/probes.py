"""A local run's server, watched by its supervisor (`deploy.local.supervisor`): a notebook's
editor asked what it last did (`ServerWatch`), an app's server asked whether it is healthy
(`HealthWatch`). Each says RUNNING once its server answers, and why it failed to start when
it has not in time."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from deploy.local.state import now_iso, update_state
from deploy.types import Phase

if TYPE_CHECKING:
    from deploy.local.supervisor import Supervisor

POLL_S = 0.1  # the supervisor's loop; a server not answering yet is asked again after it


class ServerWatch:
    """Asks the editor's REST API (`plan.editor_probe`) whether it answers, then every
    `every_s` what it last did, into the state file: `last_activity` (Jupyter's own, which
    counts requests, kernels and terminals; now while a kernel is busy, since a long cell
    prints nothing), `kernels`, `connections`. Its requests do not count as activity."""

    def __init__(self, probe: dict[str, Any]) -> None:
        self.api = str(probe["api"])
        self.token = str(probe["token"])
        self.every = float(probe.get("every_s") or 10)
        self.ready_s = float(probe.get("ready_s") or 180)
        self.ready_by: float | None = None  # counted from the first look, after the pull
        self.ready = False
        self.next_at = 0.0
        self.seen: dict[str, Any] = {}

    def tick(self, supervisor: Supervisor) -> str:
        """One look when due; why the editor failed to start, or ''."""
        now = time.monotonic()
        if now < self.next_at:
            return ""
        if self.ready_by is None:
            self.ready_by = now + self.ready_s
        status = self._get("status")
        if not self.ready:
            if status is None:
                self.next_at = now + POLL_S
                if now < self.ready_by:
                    return ""
                return "the editor did not answer on its port in time"
            self.ready = True
        if status is not None:
            activity = self._activity(status)
            if not self.seen:
                supervisor.announce(phase=Phase.RUNNING.value, reason="running", **activity)
            elif activity != self.seen:
                update_state(supervisor.run, **activity)
            self.seen = activity
        self.next_at = time.monotonic() + self.every
        return ""

    def _activity(self, status: dict[str, Any]) -> dict[str, Any]:
        kernels = int(status.get("kernels") or 0)
        last = _utc_iso(str(status.get("last_activity") or ""))
        if kernels and self._busy_kernels():
            last = now_iso()
        return {
            "last_activity": last,
            "kernels": kernels,
            "connections": int(status.get("connections") or 0),
        }

    def _busy_kernels(self) -> int:
        kernels = self._get("kernels?no_track_activity=1")
        if not isinstance(kernels, list):
            return 0
        return sum(1 for k in kernels if isinstance(k, dict) and k.get("execution_state") == "busy")

    def _get(self, path: str) -> Any:
        """The JSON answer of GET api/`path`, or None when it does not answer (yet)."""
        request = urllib.request.Request(  # noqa: S310 - http on 127.0.0.1, from the plan
            self.api + path, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
                return json.loads(response.read())
        except (OSError, ValueError):
            return None


class HealthWatch:
    """An app's server: RUNNING once GET `health` answers 2xx (after its weights are
    loaded); failed when it has not within `ready_s`. Nothing is read afterwards."""

    def __init__(self, probe: dict[str, Any]) -> None:
        self.url = str(probe["health"])
        self.ready_s = float(probe.get("ready_s") or 300)
        self.ready_by: float | None = None
        self.ready = False
        self.next_at = 0.0

    def tick(self, supervisor: Supervisor) -> str:
        now = time.monotonic()
        if self.ready or now < self.next_at:
            return ""
        if self.ready_by is None:
            self.ready_by = now + self.ready_s
        try:
            with urllib.request.urlopen(self.url, timeout=2) as response:  # noqa: S310 - loopback
                answered = 200 <= response.status < 300
        except OSError:
            answered = False
        if answered:
            self.ready = True
            supervisor.announce(phase=Phase.RUNNING.value, reason="running")
            return ""
        self.next_at = now + 0.25
        return "" if now < self.ready_by else "the server did not answer its probe in time"


def _utc_iso(value: str) -> str | None:
    """Jupyter's timestamp ('...Z') as the state file writes times, or None."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC).isoformat(timespec="microseconds")
