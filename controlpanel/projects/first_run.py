"""The project page's first-run card, "start here": in a project that holds the demo bucket
(`make run`'s Demo project), three steps, each ticked once the project has done it (a demo
fine-tune DONE, an app deployed, a notebook started), until the user closes it. The steps are
read from the kinds' own selectors; closing is the one write, kept here beside its read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db import IntegrityError, transaction
from django.urls import reverse

from controlpanel.projects.models import FirstRunDismissal, Project


@dataclass(frozen=True)
class Step:
    """One step: what to do, where, and whether the project did it already."""

    title: str
    text: str
    url: str
    action: str
    done: bool


@dataclass(frozen=True)
class FirstRun:
    steps: list[Step]

    @property
    def next_step(self) -> Step | None:
        return next((step for step in self.steps if not step.done), None)

    @property
    def all_done(self) -> bool:
        return self.next_step is None


def first_run_for(*, project: Project, user: Any) -> FirstRun | None:
    """The card for `user` in `project`; None where it is not shown (no demo bucket, or the
    user closed it)."""
    from controlpanel.buckets.models import Bucket
    from controlpanel.jobs.demo import DEMO_BUCKET

    if not Bucket.objects.filter(project=project, name=DEMO_BUCKET).exists():
        return None
    if FirstRunDismissal.objects.filter(project=project, user=user).exists():
        return None
    return FirstRun(steps=_steps(project))


def _steps(project: Project) -> list[Step]:
    from controlpanel.jobs.selectors import jobs_for_project
    from controlpanel.jobs.states import JobState
    from controlpanel.notebooks.selectors import notebooks_for_project
    from controlpanel.served.selectors import apps_for_project

    finetunes = jobs_for_project(project=project).filter(preset="finetune")
    trained = finetunes.filter(state=JobState.DONE).order_by("-finished_at").first()
    slug = {"slug": project.slug}
    deploy = reverse("app-new", kwargs=slug)
    if trained is not None:
        deploy += "?" + urlencode({"from_job": str(trained.pk)})
    return [
        Step(
            "Fine-tune the demo model",
            "A LoRA fine-tune of a tiny model on a small chat dataset, both in the demo "
            "bucket: the form is filled in, it runs on the CPU in about a minute.",
            reverse("job-new", kwargs=slug),
            "New fine-tune",
            trained is not None,
        ),
        Step(
            "Deploy its adapter",
            "Serve the fine-tuned model as an app with an OpenAI-compatible URL, and try it.",
            deploy,
            "Deploy",
            apps_for_project(project=project).exists(),
        ),
        Step(
            "Open a notebook",
            "JupyterLab with the demo bucket mounted: read the adapter, plot the loss.",
            reverse("notebook-new", kwargs=slug),
            "New notebook",
            notebooks_for_project(project=project).exists(),
        ),
    ]


def first_run_dismiss(*, project: Project, user: Any) -> None:
    """Close the card for `user` in `project` (again: nothing more)."""
    try:
        with transaction.atomic():
            FirstRunDismissal.objects.create(project=project, user=user)
    except IntegrityError:
        pass  # closed already (another tab)
