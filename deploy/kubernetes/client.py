"""Builds the one `ApiClient` of the process: in-cluster config inside a pod, else
`KUBECONFIG` (or ~/.kube/config), else an explicit host (`kubectl proxy`, which adds the
credentials: the client sends none itself).

Its User-Agent names Ajuste, its version and the process (`user_agent`): the API server's audit
log tells the watcher and log collector from a Celery worker's reconciles and finalizes, and
beat from the web processes."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from kubernetes import config
from kubernetes.client import ApiClient, Configuration

from deploy.version import VERSION

_lock = threading.Lock()
_clients: dict[tuple[str | None, str | None, str | None], ApiClient] = {}


def make_api_client(
    *, host: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> ApiClient:
    """The shared client for these settings; built once, then reused (it pools connections)."""
    key = (host, kubeconfig, context)
    with _lock:
        if key not in _clients:
            client = ApiClient(_configuration(host, kubeconfig, context))
            client.user_agent = user_agent()
            _clients[key] = client
        return _clients[key]


def user_agent(argv: Sequence[str] | None = None) -> str:
    """`ajuste/<version> (<process>)`: `manage.py <command>` is named by its command
    (`watch_workloads`), Celery by its role (`celery-worker`, `celery-beat`), anything else
    by its program (`gunicorn`)."""
    return f"ajuste/{VERSION} ({process_name(sys.argv if argv is None else argv)})"


def process_name(argv: Sequence[str]) -> str:
    path = Path(argv[0]) if argv else Path()
    program = path.parent.name if path.name == "__main__.py" else path.name  # python -m
    args = [a for a in argv[1:] if not a.startswith("-")]
    if program == "manage.py" and args:
        return args[0]
    if program == "celery":
        role = next((a for a in args if a in ("worker", "beat")), "")
        return f"celery-{role}" if role else "celery"
    return program or "python"


def _configuration(host: str | None, kubeconfig: str | None, context: str | None) -> Configuration:
    configuration = Configuration()
    if host is not None:
        configuration.host = host
    elif kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return configuration
