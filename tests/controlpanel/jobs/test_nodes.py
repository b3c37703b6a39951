"""A job's `nodes` (issue 29): asked for by the API, the form and the CLI, checked at submit
(the site's limit, the backend, the project's quota for all nodes at once), stored, and counted
whole by admission. One node is exactly today's job."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.engine.admission import Need, job_need
from controlpanel.flavors.models import Flavor
from controlpanel.jobs import nodes as job_nodes
from controlpanel.jobs.models import Job
from controlpanel.jobs.nodes import NODES_NOTE
from controlpanel.projects.models import Project
from tests.fixtures.cli import cli_as, ok_json
from tests.fixtures.jobs import submit

BODY = {
    "image": "registry.example.com/train:1",
    "command": ["python", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 2,
}
URL = "/api/v1/jobs/?project=alpha"


@pytest.fixture
def multi_node(k8s_jobs: Any) -> Any:
    """The Kubernetes backend, which runs a job of several nodes as its JobSet."""
    return k8s_jobs


def test_only_the_backends_that_run_jobsets_take_more_than_one_node(
    owner_api: Any, k8s_jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert frozenset({"kubernetes", "local"}) == job_nodes.MULTI_NODE_BACKENDS
    assert owner_api.post(URL, BODY | {"nodes": 2}, "json").status_code == 201
    monkeypatch.setattr(job_nodes, "MULTI_NODE_BACKENDS", frozenset())  # switched off
    answer = owner_api.post(URL, BODY | {"nodes": 2}, "json")
    assert (answer.status_code, answer.json()) == (400, {"nodes": [NODES_NOTE]})
    assert Job.objects.count() == 1
    assert owner_api.post(URL, BODY | {"nodes": 1}, "json").status_code == 201


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (0, "Ask for at least 1 node."),
        ("two", "The node count must be a whole number, not 'two'."),
        (True, "The node count must be a whole number."),
        (9, "At most 8 nodes per job (asked for 9)."),
    ],
)
def test_a_bad_node_count_is_refused_under_nodes_and_saves_nothing(
    owner_api: Any, multi_node: Any, nodes: Any, message: str
) -> None:
    answer = owner_api.post(URL, BODY | {"nodes": nodes}, "json")
    assert (answer.status_code, answer.json()) == (400, {"nodes": [message]})
    assert not Job.objects.exists()


def test_the_limit_is_the_sites_setting(owner_api: Any, multi_node: Any, settings: Any) -> None:
    settings.MAX_NODES_PER_JOB = 2
    answer = owner_api.post(URL, BODY | {"nodes": 3}, "json")
    assert answer.json() == {"nodes": ["At most 2 nodes per job (asked for 3)."]}
    assert owner_api.post(URL, BODY | {"nodes": 2}, "json").status_code == 201


def test_nodes_over_the_projects_gpu_quota_together_are_refused(
    project: Project, owner_api: Any, multi_node: Any
) -> None:
    """Each node fits the quota, all of them do not: the gang could never start."""
    project.gpu_quota = 6
    project.save()
    answer = owner_api.post(URL, BODY | {"nodes": 4}, "json")
    assert answer.json() == {
        "nodes": [
            "4 nodes of 2 GPUs need 8 GPUs at once but the project's quota is 6: "
            "the job could never start."
        ]
    }
    assert owner_api.post(URL, BODY | {"nodes": 3}, "json").status_code == 201
    assert list(Job.objects.values_list("nodes", flat=True)) == [3]


def test_the_local_backend_takes_more_than_one_node(
    project: Project, owner: Any, owner_api: Any, local_jobs: Any
) -> None:
    """`make run` runs one torchrun agent per node (deploy/local/group.py)."""
    cpu = Flavor.objects.get(name="ai1-1-cpu")
    assert job_nodes.check_nodes(2, 1, cpu, project) == 2


def test_nodes_default_to_one_and_are_read_back(owner_api: Any, multi_node: Any) -> None:
    one = owner_api.post(URL, BODY, "json").json()
    two = owner_api.post(URL, BODY | {"nodes": "2"}, "json").json()
    assert (one["nodes"], two["nodes"]) == (1, 2)
    assert owner_api.get(f"/api/v1/jobs/{two['id']}/?project=alpha").json()["nodes"] == 2


def test_the_form_takes_nodes(owner_client: Any, multi_node: Any) -> None:
    page = owner_client.post(
        "/p/alpha/jobs/new/?tab=custom",
        {
            "tab": "custom",
            "c-image": "x/y:1",
            "c-flavor": "h100-1-gpu",
            "c-gpu": "1",
            "c-nodes": "2",
        },
    )
    assert page.status_code == 302, page.content[-2000:]
    assert Job.objects.get().nodes == 2
    refused = owner_client.post(
        "/p/alpha/jobs/new/?tab=custom",
        {
            "tab": "custom",
            "c-image": "x/y:1",
            "c-flavor": "h100-1-gpu",
            "c-gpu": "1",
            "c-nodes": "0",
        },
    )
    assert refused.status_code == 400
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_cli_takes_nodes(live_server: Any, owner: Any, panel_s3: Any, multi_node: Any) -> None:
    run = cli_as(owner, live_server.url)
    job = ok_json(
        run(
            "job",
            "run",
            "--flavor",
            "h100-1-gpu",
            "--gpu",
            "2",
            "--nodes",
            "2",
            "-o",
            "json",
            "x/y:1",
        )
    )
    assert (job["nodes"], job["gpu"]) == (2, 2)
    refused = run("job", "run", "--flavor", "h100-1-gpu", "--nodes", "20", "x/y:1")
    assert refused.exit_code == 1
    assert "HTTP 400: --nodes: At most 8 nodes per job (asked for 20)." in refused.output


def test_admission_counts_every_node_at_once(project: Project, owner: Any, multi_node: Any) -> None:
    one = submit(project, owner, gpu=2)
    two = submit(project, owner, gpu=2, nodes=2)
    assert (job_need(one).gpus, job_need(one).pods) == (2, 1)
    assert (job_need(two).gpus, job_need(two).pods) == (4, 2)
    assert job_need(two).millicpu == 2 * job_need(one).millicpu
    assert isinstance(job_need(two), Need)
