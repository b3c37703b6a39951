"""The training curve moves from a JSON column (rewritten whole on each log update) to
append-only CurvePoint rows; ended logs can move to object storage (LogArchive); a failed run's
kept workspace claim gets a deletion date (workspace_deleted_at)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def curves_to_rows(apps, schema_editor):
    """Every stored curve becomes its rows, in order (the kept points are the same)."""
    Workload = apps.get_model("workloads", "Workload")
    CurvePoint = apps.get_model("workloads", "CurvePoint")
    rows = Workload.objects.exclude(loss_curve=[]).values_list("pk", "loss_curve")
    for pk, curve in rows.iterator(chunk_size=200):
        points = [p for p in curve if isinstance(p, list)] if isinstance(curve, list) else []
        CurvePoint.objects.bulk_create([CurvePoint(job_id=pk, point=p) for p in points])
        Workload.objects.filter(pk=pk).update(curve_points=len(points))


def rows_to_curves(apps, schema_editor):
    Workload = apps.get_model("workloads", "Workload")
    CurvePoint = apps.get_model("workloads", "CurvePoint")
    curves: dict = {}
    for job_id, point in CurvePoint.objects.order_by("id").values_list("job_id", "point"):
        curves.setdefault(job_id, []).append(point)
    for job_id, curve in curves.items():
        Workload.objects.filter(pk=job_id).update(loss_curve=curve)


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0011_jobrun_ends_by"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="curve_points",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="workload",
            name="workspace_deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="CurvePoint",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("point", models.JSONField()),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="curve_rows",
                        to="workloads.workload",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["job", "id"], name="workloads_c_job_id_d7d82d_idx")
                ],
            },
        ),
        migrations.RunPython(curves_to_rows, rows_to_curves),
        migrations.RemoveField(
            model_name="workload",
            name="loss_curve",
        ),
        migrations.CreateModel(
            name="LogArchive",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("run", models.PositiveIntegerField()),
                ("datastore", models.CharField(max_length=32)),
                ("bucket", models.CharField(max_length=63)),
                ("key", models.CharField(max_length=300)),
                ("lines", models.PositiveIntegerField()),
                ("size", models.BigIntegerField(help_text="Bytes of the compressed object.")),
                ("archived_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("deleted_at", models.DateTimeField(blank=True, null=True)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="log_archives",
                        to="workloads.workload",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["archived_at"], name="workloads_l_archive_550a8e_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("job", "run"), name="one_log_archive_per_run")
                ],
            },
        ),
    ]
