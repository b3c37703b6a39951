"""Builds the one `ApiClient` of the process: in-cluster config inside a pod, else
`KUBECONFIG` (or ~/.kube/config), else an explicit host (`kubectl proxy`, which adds the
credentials: the client sends none itself)."""

from __future__ import annotations

import os
import threading

from kubernetes import config
from kubernetes.client import ApiClient, Configuration

_lock = threading.Lock()
_clients: dict[tuple[str | None, str | None, str | None], ApiClient] = {}


def make_api_client(
    *, host: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> ApiClient:
    """The shared client for these settings; built once, then reused (it pools connections)."""
    key = (host, kubeconfig, context)
    with _lock:
        if key not in _clients:
            _clients[key] = ApiClient(_configuration(host, kubeconfig, context))
        return _clients[key]


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
