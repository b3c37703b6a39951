"""Indexes the dashboards read on the workload engine's tables (created here, by name, so the
workloads app's own migrations stay its own): waits and ends by project and time, and the
runs a day's rollup reads (those that ended after the day began, and the open ones)."""

from django.db import migrations

INDEXES = {
    "dash_wl_project_admitted": "workloads_workload (project_id, admitted_at)",
    "dash_wl_admitted": "workloads_workload (admitted_at)",
    "dash_wl_project_finished": "workloads_workload (project_id, finished_at)",
    "dash_wl_finished": "workloads_workload (finished_at)",
    "dash_wl_project_started": "workloads_workload (project_id, started_at)",
    "dash_wl_started": "workloads_workload (started_at)",
    "dash_run_finished": "workloads_jobrun (finished_at)",
    "dash_run_open": "workloads_jobrun (started_at) WHERE finished_at IS NULL",
}


class Migration(migrations.Migration):
    dependencies = [
        ("dashboards", "0001_initial"),
        ("workloads", "0005_notebook_images"),
    ]

    operations = [
        migrations.RunSQL(
            f"CREATE INDEX IF NOT EXISTS {name} ON {target}",
            f"DROP INDEX IF EXISTS {name}",
        )
        for name, target in INDEXES.items()
    ]
