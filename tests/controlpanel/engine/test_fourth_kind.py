"""A fourth kind registered at test time (issue 24): the toy "batch" kind of toykind/ is one
entry in controlpanel/kinds.py and one in INSTALLED_APPS, and then its page, its API route,
its `ajuste` group, admission and the dashboards' cost chart take it in, with no edit to the
engine's files. The app registry, the URL conf and the CLI's groups are rebuilt as a start-up
would build them, and rebuilt without it after."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import date
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner
from django.apps import apps
from django.conf import settings
from django.test.utils import override_settings
from django.urls import clear_url_caches, reverse

from controlpanel.accounts.services import token_create
from controlpanel.engine import admission, registry
from controlpanel.engine.models import JobEvent, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.kinds import KINDS
from controlpanel.projects.models import Project
from tests.fixtures.panel import api_client_for, logged_in

TOY = "tests.controlpanel.engine.toykind"
# What reads the registry as it loads: rebuilt with the toy kind, and again without it.
BUILT_AT_START = [
    "controlpanel.engine.urls",
    "controlpanel.api.urls",
    settings.ROOT_URLCONF,
    "controlpanel.cli.main",
    "controlpanel.dashboards.charts",
]


def _rebuild() -> None:
    registry._specs.cache_clear()
    for name in BUILT_AT_START:
        importlib.reload(importlib.import_module(name))
    clear_url_caches()


@pytest.fixture
def toy_kind() -> Iterator[Any]:
    try:
        with (
            mock.patch.dict(KINDS, {"batch": TOY}),
            override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, TOY]),
        ):
            _rebuild()
            yield importlib.import_module(f"{TOY}.models").Batch
    finally:  # rebuilt without it, even when rebuilding with it failed
        _rebuild()


def _batch(batch_model: Any, project: Project, owner: Any, name: str, **fields: Any) -> Any:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    return batch_model.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="registry.example.com/infer:1",
        flavor=flavor,
        **fields,
    )


def test_the_toy_kind_is_registered_and_unregistered(toy_kind: Any) -> None:
    spec = registry.kind_of("batch")
    assert [k.name for k in registry.kinds()] == ["job", "notebook", "app", "batch"]
    assert spec.model is toy_kind and spec.model._meta.concrete_model is Workload
    assert apps.is_installed(TOY)
    assert reverse("batch-list", kwargs={"slug": "alpha"}) == "/p/alpha/batches/"


def test_without_it_nothing_of_it_is_left() -> None:
    """The fixture's undo (and the default): no route, no spec, no group."""
    assert "batch" not in {k.name for k in registry.kinds()}
    assert not apps.is_installed(TOY)
    from controlpanel.cli.main import GROUPS

    assert "batch" not in {g.name for g in GROUPS}
    with pytest.raises(Exception, match="batch-list"):
        reverse("batch-list", kwargs={"slug": "alpha"})


@pytest.mark.django_db
def test_its_page_and_api_list_the_projects_batches_only(
    toy_kind: Any, project: Project, owner: Any, other_project: Project, outsider: Any
) -> None:
    _batch(toy_kind, project, owner, "embed-corpus")
    _batch(toy_kind, other_project, outsider, "theirs")
    page = logged_in(owner).get("/p/alpha/batches/")
    assert page.status_code == 200
    assert b"embed-corpus QUEUED" in page.content and b"theirs" not in page.content
    answer = api_client_for(owner).get("/api/v1/batches/", {"project": "alpha"})
    assert answer.status_code == 200, answer.content
    assert [(r["name"], r["kind"]) for r in answer.json()["results"]] == [("embed-corpus", "batch")]
    # Another project's member reaches neither.
    assert logged_in(outsider).get("/p/alpha/batches/").status_code == 404
    assert api_client_for(outsider).get("/api/v1/batches/", {"project": "alpha"}).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_its_cli_group_lists_them_through_the_live_api(
    toy_kind: Any, live_server: Any, project: Project, owner: Any
) -> None:
    _batch(toy_kind, project, owner, "embed-corpus")
    main = importlib.import_module("controlpanel.cli.main")
    assert "batch" in {g.name for g in main.GROUPS}
    _, token = token_create(user=owner, name="cli")
    env = {"AJUSTE_URL": live_server.url, "AJUSTE_TOKEN": token, "AJUSTE_PROJECT": "alpha"}
    result = CliRunner().invoke(main.cli, ["batch", "list"], env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.output.strip() == "embed-corpus QUEUED"


@pytest.mark.django_db
def test_admission_queues_a_waiting_batch_by_its_own_spec(
    toy_kind: Any, project: Project, owner: Any
) -> None:
    """Admission reads the batch's waiting state from its spec: on this machine (the local
    backend, 2 vCPU) a one-H100 batch can never start, and it is told so, in its place."""
    batch = _batch(toy_kind, project, owner, "embed-corpus")
    assert [w.pk for w in admission.waiting_jobs(project=project)] == [batch.pk]
    assert admission.admit_jobs(project_id=project.pk) == []
    batch.refresh_from_db()
    assert batch.admitted_at is None and batch.state == "QUEUED"
    assert batch.state_reason.endswith(
        "it can never start here (AJUSTE_LOCAL_CPUS and "
        "AJUSTE_LOCAL_MEMORY_GIB set what the local backend may use); position 1 in the queue"
    )
    assert JobEvent.objects.filter(job=batch, reason=batch.state_reason).exists()


def test_the_dashboards_cost_chart_names_it_by_its_plural(toy_kind: Any) -> None:
    charts = importlib.import_module("controlpanel.dashboards.charts")
    assert "batch" in charts.JUDGED
    today = date(2025, 1, 2)

    class Usage:
        def grouped(self, *by: str, **kw: Any) -> list[dict[str, Any]]:
            return [{"day": today, "kind": "batch", "price_minutes": 60}]

    class Filters:
        days = [today]

    cost = charts._cost(Filters(), Usage())  # type: ignore[arg-type]
    assert [s["name"] for s in cost["series"]] == ["batches"]
