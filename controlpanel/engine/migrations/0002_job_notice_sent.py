from typing import Any

from django.db import migrations, models
from django.db.models import F


def claims_before_this_were_sent(apps: Any, schema_editor: Any) -> None:
    """Notices claimed before this field existed were handed over then: none is sent again."""
    apps.get_model("workloads", "Job").objects.update(notice_sent_run=F("notified_run"))


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="notice_claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="notice_sent_run",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(claims_before_this_were_sent, migrations.RunPython.noop),
    ]
