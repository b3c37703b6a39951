"""The process's Kubernetes client (deploy/kubernetes/client.py) names Ajuste, its version and
the process in its User-Agent, so the API server's audit log (and the fault suite's emulator)
tells the watcher from a Celery worker."""

from __future__ import annotations

import pytest

from deploy.kubernetes.api import KubeApi
from deploy.kubernetes.client import make_api_client, process_name, user_agent
from deploy.version import VERSION
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = pytest.mark.k8s


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["manage.py", "watch_workloads"], "watch_workloads"),
        (["/srv/ajuste/manage.py", "--settings=x", "migrate"], "migrate"),
        (["/venv/bin/celery", "-A", "controlpanel", "worker", "-Q", "celery"], "celery-worker"),
        (
            ["/venv/lib/python3.12/site-packages/celery/__main__.py", "-A", "cp", "beat"],
            "celery-beat",
        ),
        (["/venv/lib/python3.12/site-packages/celery/__main__.py", "inspect"], "celery"),
        (["/venv/bin/gunicorn", "controlpanel.wsgi"], "gunicorn"),
        (["/venv/lib/python3.12/site-packages/pytest/__main__.py", "tests"], "pytest"),
        ([], "python"),
    ],
)
def test_each_process_has_its_name(argv: list[str], name: str) -> None:
    assert process_name(argv) == name
    assert user_agent(argv) == f"ajuste/{VERSION} ({name})"


def test_the_shared_client_sends_it(k8s_cluster: EmulatedCluster) -> None:
    """A request of the process's client reaches the server with the process's agent (here
    pytest's), not the generated client's default (`OpenAPI-Generator/<version>/python`)."""
    client = make_api_client(kubeconfig=k8s_cluster.kubeconfig)
    assert client is make_api_client(kubeconfig=k8s_cluster.kubeconfig)  # built once
    KubeApi(client).list("Namespace")
    sent = k8s_cluster.requests()[-1].headers["User-Agent"]
    assert sent == user_agent() == f"ajuste/{VERSION} (pytest)"
    assert not sent.startswith("OpenAPI-Generator")
