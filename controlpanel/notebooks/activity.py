"""What a notebook's server last did, read on a cluster: a sweep chore (never a page) asks each
running notebook's server through its Service, as the panel's own requests reach a cluster
Service (APP_SERVICE_URL), with the server's own token, and keeps the later of that and what
the row holds ("Keep it running" is a click the server never saw).

- JupyterLab: `GET <base>api/status` gives `last_activity` (its own: requests, kernels and
  terminals; the status request itself is not counted), and a busy kernel counts as now (a cell
  that runs for hours prints nothing): `GET <base>api/kernels?no_track_activity=1`.
- code-server: `GET /healthz` gives `lastHeartbeat` (milliseconds), which every request but
  the health check's own moves, and which open connections keep beating.

The local backend needs none of this: its supervisor reads the same endpoints and reports
them with each observation (deploy/local/supervisor.py). A server that does not answer tells
nothing: the row keeps what it had (an unknown activity never stops a notebook)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from controlpanel.engine.backend import job_ref
from controlpanel.notebooks.auth import notebook_path, notebook_token
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState as N
from controlpanel.streams import channels
from deploy import names
from deploy.types import Editor

log = logging.getLogger(__name__)
SERVICE_PORT = 80  # the port of the notebook's Service (deploy/manifests/notebooks.py)
READ_EVERY_S = 60  # each server at most once a minute, however often the sweep runs
TIMEOUT_S = 2.0  # a server that does not answer costs the sweep this, at most, per round
AT_ONCE = 8  # servers asked in parallel
PER_SWEEP = 400  # the rest wait for the next sweep (the oldest read first)
READ_AT = "ajuste:notebook-activity:{}"  # when each notebook was last asked (epoch seconds)


def cluster_activity_read() -> int:
    """The sweep's chore: ask the running notebooks' servers that are due what they last did;
    how many answered with an activity later than the row's."""
    if settings.COMPUTE_BACKEND == "local":
        return 0  # reported with each observation (the supervisor)
    due = _due(timezone.now())
    if not due:
        return 0
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        found = list(pool.map(_read, due))
    return sum(_record(notebook, at) for notebook, at in zip(due, found, strict=True))


def _due(now: datetime) -> list[Notebook]:
    """The running notebooks not asked within READ_EVERY_S, by the clock the panel reads (a
    cache key's own expiry would follow another clock)."""
    rows = list(
        Notebook.objects.filter(state=N.RUNNING, stop_requested=False).select_related("project")
    )
    keys = {READ_AT.format(row.pk): row for row in rows}
    asked = cache.get_many(list(keys))
    last = {key: float(asked.get(key) or 0) for key in keys}
    waiting = sorted(
        (key for key in keys if now.timestamp() - last[key] >= READ_EVERY_S), key=last.__getitem__
    )[:PER_SWEEP]
    cache.set_many({key: now.timestamp() for key in waiting}, timeout=READ_EVERY_S * 10)
    return [keys[key] for key in waiting]


def service_base(notebook: Notebook) -> str:
    """The notebook's Service as the panel reaches it (no trailing slash)."""
    service = names.notebook_name(job_ref(notebook))
    url = settings.APP_SERVICE_URL.format(
        service=service, namespace=notebook.project.namespace, port=SERVICE_PORT
    )
    return url.rstrip("/")


def _read(notebook: Notebook) -> datetime | None:
    """The server's last activity, or None when it does not say (no answer, no such field)."""
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            if (notebook.editor or Editor.JUPYTERLAB) == Editor.VSCODE:
                return _code_server(client, service_base(notebook))
            return _jupyter(client, notebook)
    except (httpx.HTTPError, ValueError, TypeError, KeyError) as exc:
        log.info("notebook %s: no activity read (%s)", notebook.pk, type(exc).__name__)
        return None


def _jupyter(client: httpx.Client, notebook: Notebook) -> datetime | None:
    base = service_base(notebook) + notebook_path(notebook)
    headers = {"Authorization": f"token {notebook_token(notebook)}"}
    status = _json(client.get(base + "api/status", headers=headers))
    last = _instant(str(status.get("last_activity") or ""))
    if int(status.get("kernels") or 0):
        kernels = _json(client.get(base + "api/kernels?no_track_activity=1", headers=headers))
        if any(isinstance(k, dict) and k.get("execution_state") == "busy" for k in kernels):
            return timezone.now()
    return last


def _code_server(client: httpx.Client, base: str) -> datetime | None:
    beat = _json(client.get(base + "/healthz")).get("lastHeartbeat")
    if not isinstance(beat, int | float) or beat <= 0:
        return None
    return datetime.fromtimestamp(beat / 1000, tz=UTC)


def _json(response: httpx.Response) -> Any:
    response.raise_for_status()
    return response.json()


def _instant(text: str) -> datetime | None:
    """An ISO 8601 instant (Jupyter writes `...Z`), or None."""
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _record(notebook: Notebook, at: datetime | None) -> int:
    """Keep `at` when it is later than what the row holds, for this very run (a stop or a
    new start meanwhile makes the read stale); 1 when kept. Never in the future."""
    if at is None:
        return 0
    at = min(at, timezone.now())
    later = Q(last_activity_at=None) | Q(last_activity_at__lt=at)
    rows = Notebook.objects.filter(pk=notebook.pk, run=notebook.run, state=N.RUNNING)
    kept = rows.filter(later).update(last_activity_at=at, updated_at=timezone.now())
    if kept:  # its page's idle clock moves
        channels.workload_changed(
            project_id=notebook.project_id, workload_id=notebook.pk, what="activity"
        )
    return kept
