"""Run in a process of its own by test_previous_release.py, on a database of its own:
`old LEAVES_JSON` migrates an empty database to the previous release's last migrations and
writes rows as that release's schema had them; `new` migrates it to this release's and prints
what the rows say now, as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import django

django.setup()

from django.apps import apps as current  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.migrations.executor import MigrationExecutor  # noqa: E402

OURS = {c.label for c in current.get_app_configs() if c.name.startswith("controlpanel.")}


def old(leaves: dict[str, str]) -> None:
    executor = MigrationExecutor(connection)
    targets = []
    for app, name in executor.loader.graph.leaf_nodes():
        targets.append((app, leaves.get(app)) if app in OURS else (app, name))
    executor.migrate(targets)  # (app, None): an app the previous release did not have
    reached = [(app, name) for app, name in targets if name is not None]
    state = executor.loader.project_state(reached, at_end=True)
    write_rows(state.apps)


def write_rows(apps: Any) -> None:
    """A team's day at the previous release: a user, a project, a membership, a running job
    with its log and its history."""
    user = apps.get_model(settings.AUTH_USER_MODEL).objects.create(
        username="ada", email="ada@example.com"
    )
    project = apps.get_model("projects", "Project").objects.create(slug="legacy", name="Legacy")
    apps.get_model("projects", "Membership").objects.create(
        project=project, user=user, role="manager"
    )
    flavor = apps.get_model("flavors", "Flavor").objects.get(name="ai1-1-cpu")
    job = apps.get_model("workloads", "Workload").objects.create(
        kind="job",
        project=project,
        owner=user,
        name="lora-7b",
        image="registry.example/train:1",
        command=["python", "train.py"],
        flavor=flavor,
        state="RUNNING",
        log_lines=2,
        launched_run=1,
    )
    lines = apps.get_model("workloads", "JobLogLine")
    for seq, text in enumerate(["epoch 1", "epoch 2"], start=1):
        lines.objects.create(job=job, run=1, seq=seq, text=text)
    apps.get_model("workloads", "JobEvent").objects.create(
        job=job, run=1, state="RUNNING", reason="started"
    )


def new() -> None:
    call_command("migrate", interactive=False, verbosity=0)
    workload = current.get_model("workloads", "Workload")
    job = workload.objects.get(name="lora-7b")
    installation = current.get_model("core", "Installation").objects.get()
    lines = current.get_model("workloads", "JobLogLine").objects.filter(job=job).order_by("seq")
    summary = {
        "job": [job.state, job.project.slug, job.owner.username, job.flavor.name],
        "log": list(lines.values_list("text", flat=True)),
        "events": list(job.events.values_list("state", "reason")),
        "members": [list(m) for m in job.project.memberships.values_list("user__username", "role")],
        "install_id": installation.install_id,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    if sys.argv[1] == "old":
        old(json.loads(sys.argv[2]))
    else:
        new()
