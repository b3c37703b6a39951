"""Each workload's month (billing.WorkloadMonth, billing/rollup.py), summed from the lines
already there; the lines' (period, project) index becomes (period, project, run start, run),
which the drill-down's runs page reads in order."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Count, F, Q, Sum


def fill(apps: Any, schema_editor: Any) -> None:
    """The rollup of every month from its lines (later writes keep it)."""
    line_model = apps.get_model("billing", "Line")
    month_model = apps.get_model("billing", "WorkloadMonth")
    rows = (
        line_model.objects.values("period", "project_id", "flavor_id", workload_id=F("run__job_id"))
        .annotate(
            # other names than the lines' fields: an annotation named "minutes" would
            # stand for the field in the next one
            total_minutes=Sum("minutes"),
            total_unit_minutes=Sum(F("minutes") * F("units")),
            total_price_minutes=Sum(F("minutes") * F("units") * F("price_per_hour")),
            total_adjustments=Count("pk", filter=~Q(period=F("of_period"))),
            total_lines=Count("pk"),
            total_runs=Count("run", distinct=True),
        )
        .order_by()
    )
    month_model.objects.bulk_create(
        (
            month_model(**{key.removeprefix("total_"): value for key, value in row.items()})
            for row in rows
        ),
        batch_size=2000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_sightings_budget_alerts"),
        ("flavors", "0004_resource_key_gpu_or_mig"),
        ("projects", "0008_first_run_dismissal"),
        ("workloads", "0006_app_kind"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkloadMonth",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("period", models.DateField(help_text="The month billed in.")),
                ("minutes", models.BigIntegerField(default=0)),
                ("unit_minutes", models.BigIntegerField(default=0, help_text="Σ minutes × units.")),
                (
                    "price_minutes",
                    models.DecimalField(
                        decimal_places=4,
                        default=0,
                        help_text="Σ minutes × units × price per hour.",
                        max_digits=24,
                    ),
                ),
                (
                    "adjustments",
                    models.IntegerField(default=0, help_text="Adjustment lines among them."),
                ),
                ("lines", models.IntegerField(default=0)),
                ("runs", models.IntegerField(default=0, help_text="Runs with lines among them.")),
            ],
        ),
        migrations.RemoveIndex(
            model_name="line",
            name="billing_lin_period_13a96c_idx",
        ),
        migrations.AddIndex(
            model_name="line",
            index=models.Index(
                fields=["period", "project", "run_start", "run"],
                name="billing_lin_period_6ad8ad_idx",
            ),
        ),
        migrations.AddField(
            model_name="workloadmonth",
            name="flavor",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="flavors.flavor"
            ),
        ),
        migrations.AddField(
            model_name="workloadmonth",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="projects.project"
            ),
        ),
        migrations.AddField(
            model_name="workloadmonth",
            name="workload",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="workloads.workload",
            ),
        ),
        migrations.AddIndex(
            model_name="workloadmonth",
            index=models.Index(fields=["workload"], name="billing_wor_workloa_5e34bd_idx"),
        ),
        migrations.AddConstraint(
            model_name="workloadmonth",
            constraint=models.UniqueConstraint(
                condition=models.Q(("workload__isnull", False)),
                fields=("period", "project", "workload", "flavor"),
                name="one_workload_month_per_flavor",
            ),
        ),
        migrations.AddConstraint(
            model_name="workloadmonth",
            constraint=models.UniqueConstraint(
                condition=models.Q(("workload", None)),
                fields=("period", "project", "flavor"),
                name="one_deleted_workloads_month_per_flavor",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
