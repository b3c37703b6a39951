"""The admins' capacity view: the dashboards' periodic task reads the backend (the Kubernetes
emulator's nodes and pods, or this machine) and the page shows GPUs by model and flavor, the
queue per flavor with its oldest wait, the nodes taking no work; a failed reading says why and
keeps the last good one; only site admins see it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from controlpanel.dashboards.capacity import CACHE_KEY
from controlpanel.dashboards.tasks import dashboards_rollup
from controlpanel.engine import backend as job_backend
from controlpanel.engine.models import Kind, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy.local import LocalBackend
from tests.deploy.test_k8s_capacity import A100, H100, L4, MIG_1G, node, pod
from tests.fixtures.clock import FrozenClock
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.panel import UserFactory, add_member, logged_in

pytestmark = pytest.mark.k8s


@pytest.fixture(autouse=True)
def no_reading() -> Iterator[None]:
    cache.delete(CACHE_KEY)
    yield
    cache.delete(CACHE_KEY)


@pytest.fixture
def flavors(db: Any) -> dict[str, Flavor]:
    def make(name: str, model: str, gpus: int, selector: dict[str, str]) -> Flavor:
        return Flavor.objects.create(
            name=name,
            gpu_model=model,
            gpus_per_unit=gpus,
            vcpu_per_unit=4,
            memory_gib_per_unit=16,
            node_selector=selector,
        )

    Flavor.objects.update(enabled=False)  # the seeded catalogue: these tests bring their own
    return {
        "h100x2": make("h100-2", "H100", 2, {"nvidia.com/gpu.product": H100}),
        "l4": make("l4-1", "L4", 1, {}),
        "cpu": make("cpu", "", 0, {}),
    }


@pytest.fixture
def work(frozen_clock: FrozenClock, project: Project, flavors: dict[str, Flavor]) -> None:
    """Jobs queued some seconds ago, on a clock that stands still: the waits the page shows
    are exact however long the test takes."""
    owner = UserFactory(username="alice")
    now = timezone.now()

    def make(flavor: Flavor, units: int, state: str, admitted: bool, waited_s: int) -> None:
        Workload.objects.create(
            project=project,
            owner=owner,
            name=f"w-{flavor.name}-{state}-{waited_s}",
            image="img",
            kind=Kind.JOB,
            flavor=flavor,
            gpu=units,
            state=state,
            queued_at=now - timedelta(seconds=waited_s),
            admitted_at=now if admitted else None,
        )

    make(flavors["h100x2"], 2, JobState.RUNNING, True, 7200)
    make(flavors["h100x2"], 1, JobState.QUEUED, False, 600)
    make(flavors["h100x2"], 4, JobState.QUEUED, False, 3700)
    make(flavors["l4"], 1, JobState.DONE, True, 50)  # over: holds nothing


@pytest.fixture
def cluster(k8s_jobs: Any, k8s_cluster: EmulatedCluster) -> EmulatedCluster:
    for manifest in (
        node("h100-a", gpus=8, product=H100),
        node("h100-b", gpus=8, product=H100, cordoned=True),
        node("l4-a", gpus=4, product=L4, ready=False),
    ):
        k8s_cluster.create(manifest)
    k8s_cluster.create_namespace("other-team")
    k8s_cluster.create(pod("train", gpus=4))
    k8s_cluster.kubelet.schedule("other-team", "train", "h100-a")
    return k8s_cluster


def test_the_kubernetes_reading_by_model_and_flavor_with_the_queue(
    cluster: EmulatedCluster, work: None, admin_user: Any, frozen_clock: FrozenClock
) -> None:
    response = logged_in(admin_user).get("/dashboard/capacity/")
    assert response.status_code == 200
    assert "Not read yet" in response.content.decode()
    dashboards_rollup()
    response = logged_in(admin_user).get("/dashboard/capacity/")
    assert response.status_code == 200
    context = response.context
    assert [
        (p["model"], p["total"], p["in_use"], p["unavailable"], p["free"], p["flavors"])
        for p in context["pools"]
    ] == [
        (H100, 16, 4, 8, 4, ["h100-2"]),
        (L4, 4, 0, 4, 0, ["l4-1"]),
    ]
    assert context["totals"] == {"total": 20, "in_use": 4, "unavailable": 12, "free": 4}
    assert context["mig_totals"] == {"total": 0, "in_use": 0, "unavailable": 0, "free": 0}
    rows = {row["name"]: row for row in context["flavors"]}
    assert rows["h100-2"] == {  # the older waiter's wait
        "name": "h100-2",
        "gpu_model": "H100",
        "resource": "nvidia.com/gpu",
        "mig_profile": "",
        "gpus_per_unit": 2,
        "running_units": 2,
        "running_gpus": 4,
        "waiting": 2,
        "oldest_wait_s": 3700,
        "free_units": 2,
    }
    assert (rows["l4-1"]["running_units"], rows["l4-1"]["waiting"], rows["l4-1"]["free_units"]) == (
        0,
        0,
        0,
    )
    assert rows["cpu"]["free_units"] is None and rows["cpu"]["oldest_wait_s"] is None
    body = response.content.decode()
    assert "h100-b" in body and "cordoned" in body
    assert "l4-a" in body and "Kubelet stopped posting node status." in body
    assert "1 h 01 min" in body  # the oldest wait
    frozen_clock.advance(timedelta(seconds=100))  # a wait is counted when the page is read
    later = logged_in(admin_user).get("/dashboard/capacity/")
    assert {r["name"]: r["oldest_wait_s"] for r in later.context["flavors"]}["h100-2"] == 3800


def test_a_failed_reading_says_why_and_keeps_the_last_good_one(
    cluster: EmulatedCluster, admin_user: Any, flavors: dict[str, Flavor]
) -> None:
    dashboards_rollup()
    cluster.fail_next("GET", "nodes", status=403)
    dashboards_rollup()
    response = logged_in(admin_user).get("/dashboard/capacity/")
    body = response.content.decode()
    assert "The last reading failed: (403)" in body
    assert "the figures below are the last good reading" in body
    assert response.context["totals"]["total"] == 20


def test_the_local_backend_shows_zero_gpus_and_its_cores(
    tmp_path: Path, admin_user: Any, flavors: dict[str, Flavor], settings: Any
) -> None:
    job_backend.set_backend(LocalBackend(base_dir=tmp_path, gpus=list, cpus=6, memory_gib=12))
    try:
        dashboards_rollup()
        response = logged_in(admin_user).get("/dashboard/capacity/")
    finally:
        job_backend.set_backend(None)
    body = response.content.decode()
    assert response.context["pools"] == [] and response.context["totals"]["total"] == 0
    assert "No GPU on this machine: 0 GPUs" in body
    assert "0 of 6 in use" in body and "12 GiB" in body
    assert {row["name"]: row["free_units"] for row in response.context["flavors"]} == {
        "h100-2": 0,
        "l4-1": 0,
        "cpu": None,
    }


def test_only_site_admins_see_it(project: Project, admin_user: Any) -> None:
    member = UserFactory(username="member")
    manager = UserFactory(username="manager")
    add_member(project, member)
    add_member(project, manager, role="manager")
    assert logged_in(member).get("/dashboard/capacity/").status_code == 404
    assert logged_in(manager).get("/dashboard/capacity/").status_code == 404
    for user in (member, manager):  # the figures' poll too
        poll = logged_in(user).get("/dashboard/capacity/", HTTP_HX_REQUEST="true")
        assert poll.status_code == 404 and b"capacity-figures" not in poll.content
    anonymous = Client().get("/dashboard/capacity/")
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
    assert logged_in(admin_user).get("/dashboard/capacity/").status_code == 200
    link = logged_in(admin_user).get("/dashboard/").content.decode()
    assert 'href="/dashboard/capacity/"' in link


def test_mig_slices_by_model_and_profile_and_the_flavors_that_ask_for_them(
    k8s_jobs: Any, k8s_cluster: EmulatedCluster, admin_user: Any, flavors: dict[str, Flavor]
) -> None:
    """Nodes partitioned with MIG (the GPU operator's mixed strategy): each profile is a row
    of its own beside the model's whole GPUs, and a flavor asking for a profile counts its
    free units in that row only."""
    a100 = {"nvidia.com/gpu.product": A100}
    slice_1g = Flavor.objects.create(
        name="a100-1g",
        gpu_model="A100",
        gpus_per_unit=1,
        vcpu_per_unit=2,
        memory_gib_per_unit=8,
        node_selector=a100,
        resource_key=MIG_1G,
    )
    whole = Flavor.objects.create(
        name="a100-1", gpu_model="A100", vcpu_per_unit=8, memory_gib_per_unit=64, node_selector=a100
    )
    for manifest in (
        node("a100-a", gpus=1, product=A100, mig={"1g.10gb": 7, "3g.40gb": 2}),
        node("a100-b", product=A100, mig={"1g.10gb": 7}, ready=False),
    ):
        k8s_cluster.create(manifest)
    k8s_cluster.create_namespace("other-team")
    k8s_cluster.create(pod("small", gpus=3, resource=MIG_1G))
    k8s_cluster.kubelet.schedule("other-team", "small", "a100-a")
    dashboards_rollup()
    response = logged_in(admin_user).get("/dashboard/capacity/")
    context = response.context
    assert [
        (p["model"], p["mig_profile"], p["total"], p["in_use"], p["free"], p["flavors"])
        for p in context["pools"]
    ] == [
        (A100, "", 1, 0, 1, ["a100-1"]),
        (A100, "1g.10gb", 14, 3, 4, ["a100-1g"]),
        (A100, "3g.40gb", 2, 0, 2, []),
    ]
    assert context["totals"] == {"total": 1, "in_use": 0, "unavailable": 0, "free": 1}
    assert context["mig_totals"] == {"total": 16, "in_use": 3, "unavailable": 7, "free": 6}
    rows = {row["name"]: row for row in context["flavors"]}
    assert (rows["a100-1g"]["mig_profile"], rows["a100-1g"]["free_units"]) == ("1g.10gb", 4)
    assert (rows["a100-1"]["mig_profile"], rows["a100-1"]["free_units"]) == ("", 1)
    assert whole.resource_key == "nvidia.com/gpu" and slice_1g.pk
    body = response.content.decode()
    assert 'title="nvidia.com/mig-1g.10gb">MIG 1g.10gb</span>' in body
    assert "+ 7 MIG slices" in body  # the not-ready node's
    assert "MIG slices</dt>" in body


def test_the_figures_refresh_through_htmx_and_stay_escaped(
    cluster: EmulatedCluster, work: None, admin_user: Any
) -> None:
    """The page follows the site admins' stream (a `changed` notice re-fetches the figures) and
    falls back to a poll every 30 s (held while the stream is open; paused while the tab is
    hidden, by app.js, since the strict CSP allows no hx-trigger filter); a poll gets the
    figures alone, and they move when the reading or the queue does."""
    client = logged_in(admin_user)
    page = client.get("/dashboard/capacity/").content.decode()
    assert (
        '<div id="capacity-figures" hx-get="/dashboard/capacity/" hx-trigger="every 30s, '
        'ajuste:changed from:body, visibilitychange from:document" data-poll '
        'data-pushed="/dashboard/events/" data-clock hx-swap="outerHTML"'
    ) in page
    before = client.get("/dashboard/capacity/", HTTP_HX_REQUEST="true").content.decode()
    assert before.lstrip().startswith('<div id="capacity-figures"') and "<html" not in before
    assert "Not read yet" in before and 'data-testid="gpus-total"' not in before
    hostile = node("h100-c", gpus=8, product=H100, ready=False)
    hostile["status"]["conditions"][0]["message"] = '<img src=x onerror="alert(1)">'
    cluster.create(hostile)
    dashboards_rollup()
    body = client.get("/dashboard/capacity/", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-testid="gpus-total">28 <small class="muted">4 in use, 4 free</small>' in body
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body and "<img src=x" not in body
    assert flavor_cells(body, "h100-2")[-2:] == ["2", "1 h 01 min"]
    Workload.objects.filter(state=JobState.QUEUED).delete()
    emptied = client.get("/dashboard/capacity/", HTTP_HX_REQUEST="true").content.decode()
    assert flavor_cells(emptied, "h100-2")[-2:] == ["0", "—"]


def flavor_cells(body: str, name: str) -> list[str]:
    """The cells of a flavor's row in the page's flavor table, as text."""
    table = body.split('data-testid="table-flavors"', 1)[1].split("</table>", 1)[0]
    row = re.search(rf"<tr><td>{re.escape(name)}</td>(.*?)</tr>", table, re.S)
    assert row is not None, name
    return [
        re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row[1])
    ]
