"""A deleted workload's (or project's) archived log objects are listed until the store has
deleted them (LogObjectDeletion, engine/logarchive.py)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0012_curve_points_log_archive"),
    ]

    operations = [
        migrations.CreateModel(
            name="LogObjectDeletion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("datastore", models.CharField(max_length=32)),
                ("bucket", models.CharField(max_length=63)),
                ("key", models.CharField(max_length=300)),
                ("requested_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("last_error", models.CharField(blank=True, max_length=300)),
            ],
            options={
                "indexes": [
                    models.Index(fields=["requested_at"], name="workloads_l_request_73a750_idx")
                ],
            },
        ),
    ]
