import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [("projects", "0008_first_run_dismissal")]

    operations = [
        migrations.CreateModel(
            name="ProjectQueue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "borrowing_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most GPUs beyond its quota the project may borrow from idle "
                        "projects (empty: no limit; 0: none).",
                        null=True,
                        verbose_name="GPU borrowing limit",
                    ),
                ),
                (
                    "lending_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most of its GPU quota others may borrow while it is idle "
                        "(empty: all).",
                        null=True,
                        verbose_name="GPU lending limit",
                    ),
                ),
                (
                    "fair_sharing_weight",
                    models.PositiveSmallIntegerField(
                        default=1,
                        help_text="Its share of idle GPUs against the other borrowers (Kueue's "
                        "fair sharing).",
                        validators=[
                            django.core.validators.MinValueValidator(1),
                            django.core.validators.MaxValueValidator(1000),
                        ],
                    ),
                ),
                (
                    "project",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="queue",
                        to="projects.project",
                    ),
                ),
            ],
        ),
    ]
