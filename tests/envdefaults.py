"""Loaded with `-p tests.envdefaults` before Django is set up: every test session starts from a
clean, known environment, so nothing a user exported in their shell (`DJANGO_SUPERUSER_*`,
`S3_*`, `DATABASE_URL`, `KUBECONFIG`, `AJUSTE_*`...) changes a test's result.

Tests run against the real PostgreSQL and Redis on loopback. To point a run at others, set
`AJUSTE_TEST_DATABASE_URL` / `AJUSTE_TEST_REDIS_URL`; `AJUSTE_TEST_CRDS_DIR` names the folder of
Kueue's and JobSet's CRD files when it is not ../shared/crds (the only variables read from
outside).
"""

import os

# Everything the settings, the CLI, Django's management commands and the cluster client read.
_PREFIXES = (
    "DJANGO_",
    "S3_",
    "AJUSTE_",
    "KUBERNETES_",
    "EMAIL_",
    "AXES_",
    "SECURE_",
    "CSP_",
    "SECRET_KEY",
    "WEBHOOK_",
    "WORKER_",
    "JOB_",
    "POD_",
    "NOTEBOOK_",
    "APP_",
    "BILLING_",
    "OIDC_",
    "INVITATION_",
    "DASHBOARD_",
    "DCGM_",
    "UPLOAD",
    "SWEEP_",
    "QUEUE",  # QUEUE_ENGINE, QUEUES_RECONCILE_SECONDS
    "MLFLOW_",
    "USER_CONTENT_",
    "GPU_IDLE_",
    "STREAMS_",
    "WORKSPACE_",
    "LEADER_",
    "TRY_IT_",
    "LOG_",  # LOG_LEVEL, LOG_WRITERS, LOG_ARCHIVE_*, LOG_SHARD_TTL_SECONDS...
    "WEB_",  # WEB_WORKERS, WEB_THREADS (the Procfile's gunicorn, the tunnels' cap)
)
_NAMES = {
    "ALLOWED_HOSTS",
    "API_THROTTLE_TOKEN",
    "API_THROTTLE_USER",
    "BEHIND_PROXY",
    "COMPUTE_BACKEND",
    "CSRF_TRUSTED_ORIGINS",
    "CURRENCY",
    "DATABASE_CONN_MAX_AGE",
    "DATABASE_URL",
    "DEBUG",
    "DEFAULT_FROM_EMAIL",
    "FIELD_ENCRYPTION_KEY",
    "HTTPS",
    "KUBECONFIG",
    "MAX_GPUS_PER_JOB",
    "MAX_NODES_PER_JOB",
    "METRICS_TOKEN",
    "REDIS_KEY_PREFIX",
    "REDIS_URL",
    "RETENTION_SECONDS",
    "SITE_URL",
    "STATIC_MANIFEST",
    "STATIC_COMPRESS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
}


def outside_variable(name: str) -> bool:
    """A variable a user may have exported that would change what the tests see."""
    bare = name.removesuffix("_FILE")
    return bare in _NAMES or bare.startswith(_PREFIXES)


_database = os.environ.get("AJUSTE_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ajuste")
_redis = os.environ.get("AJUSTE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
_crds = os.environ.get("AJUSTE_TEST_CRDS_DIR")
for _name in [n for n in os.environ if outside_variable(n)]:
    del os.environ[_name]
if _crds:  # read by tests/fixtures/k8s_emulator/crds.py
    os.environ["AJUSTE_TEST_CRDS_DIR"] = _crds

# One database per run (pytest-django creates test_<name> and drops it at the end) and one Redis
# key prefix per run, so runs started side by side share neither rows nor queued tasks.
os.environ["DATABASE_URL"] = f"{_database}_{os.getpid()}"
os.environ["REDIS_URL"] = _redis
os.environ["REDIS_KEY_PREFIX"] = f"ajuste-test-{os.getpid()}"
os.environ["DEBUG"] = "0"
os.environ["HTTPS"] = "0"
os.environ["SECRET_KEY"] = "tests-only-secret-key-that-is-long-enough-for-django-checks"
os.environ["STATIC_MANIFEST"] = "0"
os.environ["AJUSTE_VAR_DIR"] = f"/tmp/ajuste-tests-var-{os.getpid()}"
# What `ajuste login` stored in the user's config dir must not stand in for a test's token.
os.environ["XDG_CONFIG_HOME"] = f"{os.environ['AJUSTE_VAR_DIR']}/config"


def pytest_unconfigure(config: object) -> None:
    """This run's var/ (the generated secrets and uploads of the processes it started) goes."""
    import shutil

    shutil.rmtree(os.environ["AJUSTE_VAR_DIR"], ignore_errors=True)
