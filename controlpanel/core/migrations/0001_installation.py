"""The install's identity (`ajuste.io/install`), made here once: a new install gets it with
its schema, an upgraded one at the upgrade's migrate."""

from typing import Any

import django.utils.timezone
from django.db import migrations, models

import controlpanel.core.models


def create_installation(apps: Any, schema_editor: Any) -> None:
    installation = apps.get_model("core", "Installation")
    installation.objects.get_or_create(
        pk=1, defaults={"install_id": controlpanel.core.models.new_install_id()}
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Installation",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(
                        default=1, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "install_id",
                    models.CharField(
                        default=controlpanel.core.models.new_install_id,
                        max_length=63,
                        unique=True,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("renewed_from", models.CharField(blank=True, default="", max_length=63)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(condition=models.Q(("id", 1)), name="one_installation")
                ],
            },
        ),
        migrations.RunPython(create_installation, migrations.RunPython.noop),
    ]
