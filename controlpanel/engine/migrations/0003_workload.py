"""Jobs become one kind of workload: the table is renamed, keeps every row (all jobs), and
gains the kind column and the notebook fields (0004)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0002_job_notice_sent"),
    ]

    operations = [
        migrations.RenameModel("Job", "Workload"),
    ]
