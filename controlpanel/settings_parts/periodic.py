"""Billing, sweeps, webhooks, uploads, dashboards, the GPU idle policy and log retention: their
knobs and the periodic tasks they schedule (`beat_schedule`, settings.CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from controlpanel.env import env_choice, env_int, env_list, env_percent, env_str
from controlpanel.settings_parts.compute import (
    QUEUE_ENGINE,
    QUEUES_OBSERVE_SECONDS,
    QUEUES_RECONCILE_SECONDS,
)

__all__ = [
    "BILLING_CATCH_UP_SECONDS",
    "BILLING_TAX_RATE",
    "CURRENCY",
    "DASHBOARD_ROLLUP_SECONDS",
    "DCGM_METRIC",
    "DCGM_PROMETHEUS_URL",
    "DCGM_TIMEOUT_SECONDS",
    "GPU_IDLE_CHECK_SECONDS",
    "JOB_FINALIZE_GRACE_SECONDS",
    "JOB_ORPHAN_GRACE_SECONDS",
    "JOB_SWEEP_LOCK_SECONDS",
    "JOB_SWEEP_SECONDS",
    "LOG_ARCHIVE_BUCKET",
    "LOG_ARCHIVE_RETENTION_DAYS",
    "MLFLOW_TRACKING_URI",
    "POD_CREDENTIALS_RENEW_SECONDS",
    "RETENTION_SECONDS",
    "SWEEP_TICK_SECONDS",
    "UPLOADS_PER_HOUR",
    "UPLOAD_MAX_BYTES",
    "WEBHOOK_ALLOW_CIDRS",
    "WEBHOOK_DENY_CIDRS",
    "WEBHOOK_RETRY_BASE_MS",
    "WEBHOOK_TIMEOUT_SECONDS",
    "WORKSPACE_KEPT_DAYS",
    "WORKSPACE_ORPHAN_GRACE_SECONDS",
]

beat_schedule: dict = {}
CURRENCY = env_str("CURRENCY") or "EUR"
# Tax on invoices, in percent of the billed amount (shown on the billing pages and invoices).
BILLING_TAX_RATE = env_percent("BILLING_TAX_RATE", "0")
JOB_SWEEP_SECONDS = env_int("JOB_SWEEP_SECONDS", 10, minimum=1)
JOB_SWEEP_LOCK_SECONDS = env_int("JOB_SWEEP_LOCK_SECONDS", 120, minimum=1)
# A final row whose finalize (notice, quota, log archive) has not happened this long after its
# end lost its task (a worker killed, a broker down): the sweep sends it again.
JOB_FINALIZE_GRACE_SECONDS = env_int("JOB_FINALIZE_GRACE_SECONDS", 120, minimum=1)
# The sweep deletes a run's Jobs and pods once its row has ended (or moved on to another run)
# this long ago, and the objects are as old: nothing is left holding GPUs. A run of this
# install that no row names (made after a restored dump) is stopped this long after the sweep
# first noticed it (engine/orphans.py; raise it for a restore: docs/deploy-kubernetes.md).
JOB_ORPHAN_GRACE_SECONDS = env_int("JOB_ORPHAN_GRACE_SECONDS", 300, minimum=0)
# ...and its workspace claim (a notebook's, a job run's) is deleted only this long after it was
# first noticed: a restore is noticed well within a day (listed on the capacity page meanwhile).
WORKSPACE_ORPHAN_GRACE_SECONDS = env_int("WORKSPACE_ORPHAN_GRACE_SECONDS", 7 * 86400, minimum=86400)
# A failed webhook is retried 8 times, the first after about this, doubling up to a minute.
WEBHOOK_RETRY_BASE_MS = env_int("WEBHOOK_RETRY_BASE_MS", 2000, minimum=1)
# One webhook POST, all of it (name lookup, connection, request, answer), ends within this.
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
# Uploads (API and browser): the largest object a multipart upload may make (GiB; S3's own
# cap is 5 TiB), and how many uploads one user may start in an hour (0: no limit).
UPLOAD_MAX_BYTES = env_int("UPLOAD_MAX_GIB", 5120, minimum=1) * 1024**3
UPLOADS_PER_HOUR = env_int("UPLOADS_PER_HOUR", 10000, minimum=0)
# Webhooks reach public addresses only (controlpanel/core/public_http.py): ALLOW lets private
# ranges through (a receiver on the company network), DENY refuses more (the cluster's pod and
# service ranges when they are public); DENY wins.
WEBHOOK_ALLOW_CIDRS = env_list("WEBHOOK_ALLOW_CIDRS", [])
WEBHOOK_DENY_CIDRS = env_list("WEBHOOK_DENY_CIDRS", [])
for _name, _cidrs in (
    ("WEBHOOK_ALLOW_CIDRS", WEBHOOK_ALLOW_CIDRS),
    ("WEBHOOK_DENY_CIDRS", WEBHOOK_DENY_CIDRS),
):
    for _cidr in _cidrs:
        try:
            ipaddress.ip_network(_cidr, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{_name}: {_cidr!r} is not an address range such as 10.0.0.0/8."
            ) from None
# Short-lived pod credentials (STS) of projects with live work are renewed this often.
POD_CREDENTIALS_RENEW_SECONDS = env_int("POD_CREDENTIALS_RENEW_SECONDS", 900, minimum=60)
beat_schedule["pod-credentials-renew"] = {
    "task": "controlpanel.workloads.tasks.pod_credentials_renew",
    "schedule": float(POD_CREDENTIALS_RENEW_SECONDS),
    "options": {"expires": float(POD_CREDENTIALS_RENEW_SECONDS)},
}
# Open runs are billed up to now, and runs a crash left unrecorded are recorded, this often.
BILLING_CATCH_UP_SECONDS = env_int("BILLING_CATCH_UP_SECONDS", 300, minimum=10)
if QUEUE_ENGINE == "kueue":
    beat_schedule["queues-reconcile"] = {
        "task": "controlpanel.queues.tasks.queues_reconcile_task",
        "schedule": float(QUEUES_RECONCILE_SECONDS),
        "options": {"expires": float(QUEUES_RECONCILE_SECONDS)},
    }
    beat_schedule["queues-observe"] = {
        "task": "controlpanel.queues.tasks.queues_observe_task",
        "schedule": float(QUEUES_OBSERVE_SECONDS),
        "options": {"expires": float(QUEUES_OBSERVE_SECONDS)},
    }
beat_schedule["billing-catch-up"] = {
    "task": "controlpanel.billing.tasks.billing_catch_up",
    "schedule": float(BILLING_CATCH_UP_SECONDS),
    "options": {"expires": float(BILLING_CATCH_UP_SECONDS)},
}
# The dashboards' rollups of today and yesterday are rebuilt this often (their numbers lag by
# at most this), and GPU utilisation is read from DCGM_PROMETHEUS_URL (empty: no data).
DASHBOARD_ROLLUP_SECONDS = env_int("DASHBOARD_ROLLUP_SECONDS", 60, minimum=10)
beat_schedule["dashboards-rollup"] = {
    "task": "controlpanel.dashboards.tasks.dashboards_rollup",
    "schedule": float(DASHBOARD_ROLLUP_SECONDS),
    "options": {"expires": float(DASHBOARD_ROLLUP_SECONDS)},
}
# GPU utilisation by pod from a Prometheus that scrapes NVIDIA's DCGM exporter (its base URL,
# http(s)://host:port[/prefix]; empty: the pages say "no data"). DCGM_METRIC: the exporter's
# DCGM_FI_DEV_GPU_UTIL (percent) or DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio, shown as percent).
DCGM_PROMETHEUS_URL = (env_str("DCGM_PROMETHEUS_URL") or "").rstrip("/")
if DCGM_PROMETHEUS_URL and (
    urlsplit(DCGM_PROMETHEUS_URL).scheme not in ("http", "https")
    or not urlsplit(DCGM_PROMETHEUS_URL).hostname
):
    raise ImproperlyConfigured(
        f"DCGM_PROMETHEUS_URL: {DCGM_PROMETHEUS_URL!r} is not an http(s) URL such as "
        "http://prometheus.monitoring:9090."
    )
DCGM_METRIC = env_choice(
    "DCGM_METRIC", "DCGM_FI_DEV_GPU_UTIL", ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
)
DCGM_TIMEOUT_SECONDS = env_int("DCGM_TIMEOUT_SECONDS", 3, minimum=1)
# The GPU idle policy (controlpanel/reclaim): running GPU workloads' DCGM samples are read this
# often (a warning or a stop comes on this beat); idle GPUs are priced hour by hour.
GPU_IDLE_CHECK_SECONDS = env_int("GPU_IDLE_CHECK_SECONDS", 60, minimum=10)
beat_schedule["reclaim-check"] = {
    "task": "controlpanel.reclaim.tasks.gpu_idle_check_task",
    "schedule": float(GPU_IDLE_CHECK_SECONDS),
    "options": {"expires": float(GPU_IDLE_CHECK_SECONDS)},
}
beat_schedule["reclaim-money"] = {
    "task": "controlpanel.reclaim.tasks.idle_money_task",
    "schedule": 300.0,
    "options": {"expires": 300.0},
}
beat_schedule["jobs-sweep"] = {
    "task": "controlpanel.workloads.tasks.jobs_sweep",
    "schedule": float(JOB_SWEEP_SECONDS),
    "options": {"expires": float(JOB_SWEEP_SECONDS)},
}

# Ended logs (engine/logarchive.py): once a run's log is complete it moves out of PostgreSQL to
# the default datastore (S3_ENDPOINT_URL), one gzip object per run in LOG_ARCHIVE_BUCKET (made if
# missing); without S3_ENDPOINT_URL logs stay in PostgreSQL. Archives older than
# LOG_ARCHIVE_RETENTION_DAYS are deleted (0: kept forever). A failed run's kept workspace claim
# (a push to retry, data to rescue) is deleted WORKSPACE_KEPT_DAYS after the run ended
# (engine/workspaces.py). Both are done by one periodic task.
LOG_ARCHIVE_BUCKET = env_str("LOG_ARCHIVE_BUCKET") or "ajuste-logs"
LOG_ARCHIVE_RETENTION_DAYS = env_int("LOG_ARCHIVE_RETENTION_DAYS", 90, minimum=0)
WORKSPACE_KEPT_DAYS = env_int("WORKSPACE_KEPT_DAYS", 7, minimum=1)
RETENTION_SECONDS = env_int("RETENTION_SECONDS", 600, minimum=10)
beat_schedule["retention"] = {
    "task": "controlpanel.workloads.tasks.retention",
    "schedule": float(RETENTION_SECONDS),
    "options": {"expires": float(RETENTION_SECONDS)},
}

# Sweeps (controlpanel/sweeps): how often each running sweep is advanced (pruning reads the
# trials' loss curves, finished trials make room for new ones); a trial's end advances it too.
SWEEP_TICK_SECONDS = env_int("SWEEP_TICK_SECONDS", 5, minimum=1)
beat_schedule["sweeps-tick"] = {
    "task": "controlpanel.sweeps.tasks.sweeps_tick",
    "schedule": float(SWEEP_TICK_SECONDS),
    "options": {"expires": float(SWEEP_TICK_SECONDS)},
}
# Optional: finished fine-tunes mirrored to this MLflow tracking server (one experiment per
# project: parameters, loss per step, the adapter's location). Empty: no export.
MLFLOW_TRACKING_URI = env_str("MLFLOW_TRACKING_URI")
