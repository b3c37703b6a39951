"""A restored backup finds objects on the cluster that its rows do not name (made after the
dump): the sweep keeps them for the orphan grace period (JOB_ORPHAN_GRACE_SECONDS, raised for
the restore window as docs/deploy-kubernetes.md says), notebooks and their workspace included,
and deletes them only once it has passed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from controlpanel.engine.backend import ensure_project
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.projects.models import Project
from deploy import names
from deploy.types import NotebookRequest
from tests.deploy.conftest import CPU

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]


def made_after_the_dump(k8s_jobs: Any, project: Project) -> NotebookRequest:
    """A notebook someone started after last night's dump: no row of the restored database."""
    notebook = NotebookRequest(
        id=str(uuid.uuid4()),
        project=project.slug,
        namespace=project.namespace,
        name="since-the-dump",
        image="quay.io/jupyter/minimal-notebook:python-3.12",
        flavor=CPU,
        token="editor-token",
    )
    ensure_project(project)
    k8s_jobs.apply_notebook(notebook=notebook)
    return notebook


def test_a_notebook_without_a_row_is_kept_for_the_grace_period(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, settings: Any
) -> None:
    """Before the fix the sweep saw no creation time on a notebook and deleted it (its
    StatefulSet, and the claim holding its workspace with it) at the first pass."""
    settings.JOB_ORPHAN_GRACE_SECONDS = 86400
    notebook = made_after_the_dump(k8s_jobs, project)
    [seen] = [o for o in k8s_jobs.observe_all() if o.id == notebook.id]
    assert seen.created_at is not None
    sweep()
    name = names.notebook_name(notebook.ref)
    assert k8s_cluster.get("statefulsets", project.namespace, name) is not None


def test_it_goes_once_the_grace_period_has_passed(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, settings: Any
) -> None:
    settings.JOB_ORPHAN_GRACE_SECONDS = 0
    notebook = made_after_the_dump(k8s_jobs, project)
    assert sweep()["orphans"] == 1
    assert [o for o in k8s_jobs.observe_all() if o.id == notebook.id] == []
