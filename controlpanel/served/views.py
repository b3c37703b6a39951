"""App pages and their htmx fragments: the list, the form (pre-filled by a fine-tune job's
"Deploy this adapter"), the detail page with its live status, replicas, the snippets that call
it, the server's log, and the actions. Like the notebook pages they read rows only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlpanel.core.htmx import wants_fragment
from controlpanel.engine import selectors
from controlpanel.engine.forms import FlavorSelect, offer_runnable
from controlpanel.engine.pages import action_view, detail_views, list_page, log_views
from controlpanel.flavors.models import Flavor
from controlpanel.jobs import selectors as jobs
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import ProjectRequest, project_view
from controlpanel.queues.positions import mark_places
from controlpanel.served import selectors as apps
from controlpanel.served import services
from controlpanel.served import stats as app_stats
from controlpanel.served import try_it as app_try
from controlpanel.served.config import Serving, app_url, replicas, user_volumes
from controlpanel.served.kind import KIND
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from controlpanel.served.try_guard import Guard
from storage.volumes import parse_volume_spec, render_volume_spec

CHANGING = frozenset(
    {AppState.QUEUED, AppState.INITIALIZING, AppState.SCALING, AppState.STOPPING, "DELETING"}
)


class AppForm(forms.Form):
    """The new-app form: the fields of app_services.FIELDS (validate_app checks them)."""

    name = forms.CharField(max_length=100, required=False)
    model = forms.CharField(max_length=400, help_text="bucket@ALIAS/folder of the model")
    adapter = forms.CharField(max_length=400, required=False, help_text="bucket@ALIAS/folder")
    model_name = forms.CharField(max_length=100, required=False)
    image = forms.CharField(max_length=300, required=False)
    flavor = forms.ChoiceField(choices=(), widget=FlavorSelect)
    gpu = forms.IntegerField(min_value=1, initial=1, label="Units")
    scaling = forms.ChoiceField(
        choices=[
            ("fixed", "Fixed replicas"),
            ("cpu", "Autoscale on CPU"),
            ("rps", "Autoscale on requests/s"),
        ],
        initial="fixed",
    )
    replicas = forms.IntegerField(min_value=1, max_value=10, initial=1, required=False)
    min_replicas = forms.IntegerField(min_value=0, max_value=10, required=False)
    max_replicas = forms.IntegerField(min_value=1, max_value=10, required=False)
    target_cpu = forms.IntegerField(min_value=1, max_value=100, required=False)
    target_rps = forms.IntegerField(min_value=1, required=False)
    probe_path = forms.CharField(max_length=200, required=False, initial="/health")
    port = forms.IntegerField(min_value=1024, max_value=65535, required=False, initial=8000)
    volumes = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    env = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    public = forms.BooleanField(required=False, label="Public (no token needed)")

    def __init__(self, *args: Any, can_manage: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not can_manage:  # app_create refuses it too: this only says so before
            public = self.fields["public"]
            public.widget.attrs["disabled"] = True
            public.help_text = services.PUBLIC_REFUSAL
        flavors = Flavor.objects.filter(enabled=True)
        flavor = self.fields["flavor"]
        assert isinstance(flavor, forms.ChoiceField)
        flavor.choices = [(f.name, f.name) for f in flavors]
        offer_runnable(self)

    def submission(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        data["volumes"] = [line.strip() for line in data["volumes"].splitlines() if line.strip()]
        env: dict[str, str] = {}
        for line in data["env"].splitlines():
            if line.strip():
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
        data["env"] = env
        return {k: v for k, v in data.items() if v is not None and v != ""}

    def place_errors(self, error: ValidationError) -> None:
        for key, problems in error.message_dict.items():
            field = key.split(".", 1)[0]
            for problem in problems:
                self.add_error(field if field in self.fields else None, problem)


@project_view()
def app_list(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    page = list_page(request, apps.apps_for_project(project=project))
    mark_places(page)
    rows = [(app, Serving.of(app), replicas(app)) for app in page]
    context = {
        "project": project,
        "kind": KIND,
        "page": page,
        "rows": rows,
        "changing": any(app.state in CHANGING for app in page),
    }
    template = "apps/list.html#app-table" if wants_fragment(request) else "apps/list.html"
    return render(request, template, context)


def adapter_initial(job: Job) -> dict[str, str]:
    """The form's model and adapter from a finished fine-tune job: its model volume (what it
    trained from) and `<its output volume>/adapter` (where training.finetune writes it)."""
    initial: dict[str, str] = {"name": f"{job.name} app"[:100], "flavor": job.flavor.name}
    for text in job.volumes:
        spec = parse_volume_spec(text)
        where = render_volume_spec(spec).rsplit(":", 2)[0]
        if spec.mount_path == "/workspace/model":
            initial["model"] = where
        elif spec.mount_path == "/workspace/output":
            initial["adapter"] = f"{where}/adapter"
    return initial


@project_view()
def app_new(request: ProjectRequest) -> HttpResponse:
    access = request.access
    initial: dict[str, Any] = {"flavor": "ai1-1-cpu"}
    from_job = request.GET.get("from_job")
    if from_job:
        job = jobs.job_get(project=access.project, job_id=from_job)
        if job.preset == "finetune" and job.state == JobState.DONE:
            initial |= adapter_initial(job)
    form = AppForm(
        request.POST if request.method == "POST" else None,
        initial=initial,
        can_manage=access.can_manage,
    )
    if request.method == "POST" and form.is_valid():
        try:
            app = services.app_create(access=access, user=request.user, data=form.submission())
        except ValidationError as exc:
            form.place_errors(exc)
        else:
            messages.success(request, f"App {app.name} is starting.")
            return redirect("app-detail", slug=access.project.slug, app_id=app.pk)
    status = 400 if form.is_bound and form.errors else 200
    return render(
        request,
        "apps/new.html",
        {"project": access.project, "kind": KIND, "form": form},
        status=status,
    )


def _detail_context(app: App) -> dict[str, Any]:
    config = Serving.of(app)
    ready, wanted = replicas(app)
    return {
        "app": app,
        "project": app.project,
        "config": config,
        "ready": ready,
        "wanted": wanted,
        "base_url": app_url(app),
        "user_volumes": user_volumes(app),
        "events": app.events.order_by("at", "pk"),
        "cost": selectors.workload_cost_estimate(workload=app),
        "hourly": selectors.hourly_price(flavor=app.flavor, units=app.gpu),
        "changing": app.state in CHANGING,
        "figures": app_stats.figures(app_id=app.pk),
        "queue_position": selectors.queue_place(job=app),
    }


def _get(request: ProjectRequest, app_id: str) -> App:
    return apps.app_get(project=request.access.project, app_id=app_id)


app_detail, app_status = detail_views(
    "app",
    _get,
    _detail_context,
    "apps/detail.html",
    try_limits={"message": app_try.MAX_MESSAGE, "tokens": app_try.MAX_TOKENS},
)

app_logs, app_log_download = log_views("app", _get)


@require_POST
@project_view()
def app_try_it(request: ProjectRequest, app_id: str) -> HttpResponse | StreamingHttpResponse:
    """The "Try it" box: one chat message to the app, its answer streamed back as text (the
    session is the credential: the page holds no API token). Refusals are one line of text."""
    app = _get(request, app_id)
    response: HttpResponse | StreamingHttpResponse
    guard = None
    try:
        ask = app_try.try_validate(request.POST)
        guard = Guard(request.user.pk)  # the deadline and the user's slot, from here on
        answer = app_try.try_open(app=app, ask=ask, guard=guard)
    except app_try.TryRefused as refused:
        if guard is not None:
            guard.done()
        response = HttpResponse(refused.message, status=refused.status)
    else:
        response = StreamingHttpResponse(app_try.TryStream(answer, guard))
        response["X-Accel-Buffering"] = "no"  # each piece goes out as it comes
    response["Content-Type"] = "text/plain; charset=utf-8"
    response["Cache-Control"] = "no-store"
    return response


ACTIONS = {
    "start": (services.app_start, "Starting, at the same URL."),
    "stop": (services.app_stop, "Stopping: its URL is kept."),
    "delete": (services.app_delete, "Deleting the app."),
}


app_action = action_view("app", _get, ACTIONS)
