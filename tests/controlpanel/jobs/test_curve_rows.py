"""The training curve stored append-only (engine/curves.py): what is read back is what the old
JSON list held (every point up to the bound, then every other one), a log update writes only its
new points, and the migration moves stored curves into rows."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

from controlpanel.engine import curves
from controlpanel.engine.logs import _commit
from controlpanel.engine.models import CurvePoint, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from deploy.types import LogChunk


def make_job(project: Project, owner: Any) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    return Job.objects.create(project=project, owner=owner, name="j", image="x", flavor=flavor)


def old_curve(batches: list[list[list[Any]]]) -> list[list[Any]]:
    """What the JSON column held: each point appended, halved (`[::2]`) past the bound."""
    curve: list[list[Any]] = []
    for batch in batches:
        for point in batch:
            curve = [*curve, point]
            if len(curve) > curves.MAX_CURVE_POINTS:
                curve = curve[::2]
    return curve


def progress_line(step: int) -> str:
    return json.dumps({"event": "progress", "v": 1, "step": step, "loss": 3 - step / 10_000})


def test_appended_rows_read_back_as_the_old_list_through_halvings(
    project: Project, owner: Any
) -> None:
    job = make_job(project, owner)
    rng = random.Random(7)
    batches, step = [], 0
    while step < 5_300:  # two halvings, some inside a batch
        size = rng.choice([1, 3, 40, 700])
        batches.append([[step + i, 1.0 / (step + i + 1), None, None] for i in range(size)])
        step += size
    for batch in batches:
        curves.append(job, batch)
        job.save(update_fields=["curve_points"])
        job.refresh_from_db()
        assert job.curve_points == CurvePoint.objects.filter(job=job).count()
    expected = old_curve(batches)
    assert job.loss_curve == expected
    assert 1000 <= len(expected) <= curves.MAX_CURVE_POINTS


def test_a_log_update_writes_its_new_points_only(project: Project, owner: Any) -> None:
    """With 1,900 points stored, storing one progress line sends one new point, never the curve:
    the statements' text stays small and the old rows are untouched."""
    job = make_job(project, owner)
    curves.replace(job, [[s, 1.0, None, None] for s in range(1, 1901)])
    first = CurvePoint.objects.filter(job=job).order_by("id").values_list("id", flat=True)[0]
    with CaptureQueriesContext(connection) as queries:
        added = _commit(job.pk, 1, "", LogChunk(lines=(progress_line(1901),), cursor="c1"))
    assert added == 1
    written = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPD"))]
    assert sum(len(sql) for sql in written) < 2_000, written
    assert not any(q["sql"].lstrip().upper().startswith("DELETE") for q in queries)
    job.refresh_from_db()
    assert job.curve_points == 1901 and job.loss_curve[-1][:2] == [1901, 3 - 1901 / 10_000]
    assert CurvePoint.objects.filter(job=job).order_by("id").first().pk == first  # type: ignore[union-attr]


def test_a_new_run_and_a_deleted_job_leave_no_points(project: Project, owner: Any) -> None:
    job = make_job(project, owner)
    curves.replace(job, [[1, 2.0, None, None], [2, 1.5, None, None]])
    assert job.loss_curve == [[1, 2.0, None, None], [2, 1.5, None, None]]
    curves.replace(job, [])
    assert job.loss_curve == [] and Workload.objects.get(pk=job.pk).curve_points == 0
    curves.replace(job, [[1, 2.0, None, None]])
    job.delete()
    assert not CurvePoint.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_stored_curves_into_rows_and_back(project: Project, owner: Any) -> None:
    before, after = (
        ("workloads", "0011_jobrun_ends_by"),
        ("workloads", "0012_curve_points_log_archive"),
    )
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    old = executor.loader.project_state([before]).apps
    flavor = old.get_model("flavors", "Flavor").objects.get(name="h100-1-gpu")
    curve = [[s, 2.0 - s / 100, 5000.0, None] for s in range(1, 151)]
    row = old.get_model("workloads", "Workload").objects.create(
        project_id=project.pk, owner_id=owner.pk, name="old", image="x", flavor=flavor,
        loss_curve=curve,
    )  # fmt: skip
    empty = old.get_model("workloads", "Workload").objects.create(
        project_id=project.pk, owner_id=owner.pk, name="none", image="x", flavor=flavor
    )
    executor = MigrationExecutor(connection)
    executor.migrate([after])
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    moved = Workload.objects.get(pk=row.pk)
    assert moved.loss_curve == curve and moved.curve_points == 150
    assert Workload.objects.get(pk=empty.pk).loss_curve == []
    # Back: the column gets its curve again.
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    old = executor.loader.project_state([before]).apps
    assert old.get_model("workloads", "Workload").objects.get(pk=row.pk).loss_curve == curve
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
