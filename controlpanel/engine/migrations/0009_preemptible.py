from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0008_nodes"),
    ]

    operations = [
        migrations.AddField(
            model_name="workload",
            name="preemptible",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "With Kueue: may borrow idle GPUs and be preempted (resumes from a checkpoint)."
                ),
            ),
        ),
    ]
