"""`/api/v1/capacity/` and `ajuste capacity`: the capacity page's figures (the same numbers as
the page, and as an independent count over the emulator's nodes and pods, MIG slices
included), declared in the OpenAPI schema; site admins only (others 403, anonymous 401)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from click.testing import CliRunner
from rest_framework.test import APIClient

from controlpanel.accounts.services import token_create
from controlpanel.cli.main import cli
from controlpanel.dashboards.tasks import dashboards_rollup
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from tests.controlpanel.dashboards.test_capacity import (  # noqa: F401  (fixtures)
    flavors,
    no_reading,
    work,
)
from tests.controlpanel.test_api_schema import Schema
from tests.deploy.test_k8s_capacity import A100, H100, L4, MIG_1G, MIG_3G, node, pod
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.panel import UserFactory, add_member, api_client_for, logged_in

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"
# name, product, resources, cordoned, ready
NODES = [
    ("h100-a", H100, {GPU: 8}, False, True),
    ("h100-b", H100, {GPU: 8}, True, True),
    ("l4-a", L4, {GPU: 4}, False, False),
    ("a100-a", A100, {GPU: 2, MIG_1G: 7, MIG_3G: 2}, False, True),
    ("a100-b", A100, {MIG_1G: 7}, False, False),
    ("cpu-a", None, {}, True, True),
]
# name, node, resource, count
PODS = [
    ("train", "h100-a", GPU, 4),
    ("old", "h100-b", GPU, 1),
    ("small", "a100-a", MIG_1G, 3),
    ("half", "a100-a", MIG_3G, 1),
    ("whole", "a100-a", GPU, 2),
]


@pytest.fixture
def cluster(k8s_jobs: Any, k8s_cluster: EmulatedCluster) -> EmulatedCluster:
    for name, product, resources, cordoned, ready in NODES:
        mig = {r.removeprefix("nvidia.com/mig-"): n for r, n in resources.items() if r != GPU}
        manifest = node(
            name, gpus=resources.get(GPU, 0), product=product, mig=mig, cordoned=cordoned
        )
        if not ready:
            manifest["status"]["conditions"][0].update(status="False", message=f"{name} is down")
        k8s_cluster.create(manifest)
    k8s_cluster.create_namespace("other-team")
    for name, where, resource, count in PODS:
        k8s_cluster.create(pod(name, gpus=count, resource=resource))
        k8s_cluster.kubelet.schedule("other-team", name, where)
    return k8s_cluster


@pytest.fixture
def mig_flavor(flavors: dict[str, Flavor]) -> Flavor:  # noqa: F811
    return Flavor.objects.create(
        name="a100-1g",
        gpu_model="A100",
        vcpu_per_unit=2,
        memory_gib_per_unit=8,
        node_selector={"nvidia.com/gpu.product": A100},
        resource_key=MIG_1G,
    )


def independent_pools() -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """(model, resource) -> (total, in use, unavailable, free), counted from NODES and PODS."""
    held: dict[tuple[str, str], int] = defaultdict(int)
    for _, where, resource, count in PODS:
        held[(where, resource)] += count
    pools: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for name, product, resources, cordoned, ready in NODES:
        for resource, count in resources.items():
            used = min(count, held[(name, resource)])
            numbers = pools[(product or "unknown", resource)]
            numbers[0] += count
            numbers[1] += used
            if cordoned or not ready:
                numbers[2] += count - used
    return {key: (t, u, x, t - u - x) for key, (t, u, x) in pools.items()}


@pytest.mark.usefixtures("work")
def test_the_api_gives_the_pages_figures_and_an_independent_count(
    cluster: EmulatedCluster,
    mig_flavor: Flavor,
    admin_user: Any,
) -> None:
    dashboards_rollup()
    body = api_client_for(admin_user).get("/api/v1/capacity/").json()
    page = logged_in(admin_user).get("/dashboard/capacity/").context
    found = body["cluster"]
    assert body["backend"] == "kubernetes" and body["error"] == "" and body["read_at"]
    assert found["pools"] == page["pools"]
    assert found["gpus"] == page["totals"] and found["mig_slices"] == page["mig_totals"]
    assert found["millicpu_in_use"] == page["cpu_in_use"] == 5 * 4000
    api_flavors = {row["name"]: row for row in body["flavors"]}
    for row in page["flavors"]:
        mine = api_flavors.pop(row["name"])
        assert mine | {"oldest_wait_s": None} == row | {"oldest_wait_s": None}
        assert (mine["oldest_wait_s"] is None) == (row["oldest_wait_s"] is None)
    assert api_flavors == {}
    assert 3700 <= {r["name"]: r for r in body["flavors"]}["h100-2"]["oldest_wait_s"] < 3760

    expected = independent_pools()
    assert {
        (p["model"], p["resource"]): (p["total"], p["in_use"], p["unavailable"], p["free"])
        for p in found["pools"]
    } == expected
    whole = [v for (_, resource), v in expected.items() if resource == GPU]
    assert found["gpus"] == dict(
        zip(
            ("total", "in_use", "unavailable", "free"),
            map(sum, zip(*whole, strict=True)),
            strict=True,
        )
    )
    assert found["mig_slices"] == {"total": 16, "in_use": 4, "unavailable": 7, "free": 5}
    by_pool = {(p["model"], p["mig_profile"]): p for p in found["pools"]}
    assert by_pool[(A100, "1g.10gb")]["flavors"] == ["a100-1g"]
    assert by_pool[(H100, "")]["flavors"] == ["h100-2"]
    slices = {r["name"]: r for r in body["flavors"]}["a100-1g"]
    assert (slices["resource"], slices["mig_profile"], slices["free_units"]) == (
        MIG_1G,
        "1g.10gb",
        expected[(A100, MIG_1G)][3],
    )
    assert [
        (n["name"], n["cordoned"], n["ready"], n["gpus"], n["mig_slices"])
        for n in found["unavailable_nodes"]
    ] == [
        ("a100-b", False, False, 0, 7),
        ("cpu-a", True, True, 0, 0),
        ("h100-b", True, True, 8, 0),
        ("l4-a", False, False, 4, 0),
    ]
    assert found["unavailable_nodes"][0]["reason"] == "a100-b is down"
    assert found["nodes"] == len(NODES)


@pytest.mark.usefixtures("work")
def test_before_a_reading_there_is_no_cluster_and_the_flavors_still_queue(
    k8s_jobs: Any,
    admin_user: Any,
) -> None:
    body = api_client_for(admin_user).get("/api/v1/capacity/").json()
    assert body["read_at"] is None and body["cluster"] is None
    rows = {row["name"]: row for row in body["flavors"]}
    assert (rows["h100-2"]["waiting"], rows["h100-2"]["free_units"]) == (2, None)


@pytest.mark.usefixtures("work")
def test_the_answers_match_the_schema(
    cluster: EmulatedCluster,
    mig_flavor: Flavor,
    admin_user: Any,
) -> None:
    client = api_client_for(admin_user)
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schema = Schema(document.json())
    schema.check("get", "/api/v1/capacity/", client.get("/api/v1/capacity/"))  # not read yet
    dashboards_rollup()
    schema.check("get", "/api/v1/capacity/", client.get("/api/v1/capacity/"))
    assert ("get", "/api/v1/capacity/") in schema.checked
    operator = UserFactory(username="operator")
    refused = api_client_for(operator).get("/api/v1/capacity/")
    schema.check("get", "/api/v1/capacity/", refused)
    anonymous = APIClient().get("/api/v1/capacity/")
    schema.check("get", "/api/v1/capacity/", anonymous)
    assert (refused.status_code, anonymous.status_code) == (403, 401)


def test_only_site_admins_read_it(project: Project, admin_user: Any) -> None:
    member = UserFactory(username="member")
    manager = UserFactory(username="manager")
    add_member(project, member)
    add_member(project, manager, role="manager")
    for user in (member, manager):
        for client in (api_client_for(user), logged_in(user)):
            refused = client.get("/api/v1/capacity/")
            assert refused.status_code == 403
            assert refused.json() == {"detail": "Only site admins can read the cluster's capacity."}
    anonymous = APIClient().get("/api/v1/capacity/")
    assert anonymous.status_code == 401 and "flavors" not in anonymous.json()
    assert api_client_for(admin_user).get("/api/v1/capacity/").status_code == 200
    assert logged_in(admin_user).get("/api/v1/capacity/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_tables_and_json(
    live_server: Any, cluster: EmulatedCluster, mig_flavor: Flavor, admin_user: Any, owner: Any
) -> None:
    dashboards_rollup()

    def run(user: Any, *args: str) -> Any:
        _, token = token_create(user=user, name="cli")
        env = {"AJUSTE_URL": live_server.url, "AJUSTE_TOKEN": token}
        return CliRunner().invoke(cli, ["capacity", *args], env=env)

    result = run(admin_user)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("kubernetes backend, read at ")
    assert lines[1] == (
        "GPUs: 22 (7 in use, 4 free); MIG slices: 16 (4 in use, 5 free); "
        "nodes: 6, 4 taking no work."
    )
    assert lines[3].split() == [
        "MODEL",
        "MIG",
        "TOTAL",
        "IN-USE",
        "UNAVAILABLE",
        "FREE",
        "NODES",
        "FLAVORS",
    ]
    rows = [line.split() for line in lines[4:9]]
    assert rows == [
        [A100, "-", "2", "2", "0", "0", "1", "-"],
        [A100, "1g.10gb", "14", "3", "7", "4", "2", "a100-1g"],
        [A100, "3g.40gb", "2", "1", "0", "1", "1", "-"],
        [H100, "-", "16", "5", "7", "4", "2", "h100-2"],
        [L4, "-", "4", "0", "4", "0", "1", "l4-1"],
    ]
    flavor = next(line for line in lines if line.startswith("a100-1g")).split()
    assert flavor == ["a100-1g", "A100", "MIG", "1g.10gb", "1", "0", "0", "4", "0", "-"]
    assert any(line.split()[:6] == ["a100-b", A100, "0", "7", "no", "no"] for line in lines)
    as_json = run(admin_user, "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.stdout)
    assert body["cluster"]["mig_slices"]["total"] == 16
    refused = run(owner)
    assert refused.exit_code != 0
    assert "Only site admins can read the cluster's capacity." in refused.output
