"""Issue 32: a flavor that can never run where the panel runs workloads is refused at submit.
On the local backend that is this machine: a GPU flavor it has no GPU of (or more units than
its GPUs) gets a sentence under `flavor` (`gpu`) through every door (API, form, CLI), nothing
is made, and the forms show such flavors disabled with the reason. A cluster decides for
itself: the Kubernetes backend takes them as before."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.buckets.models import Bucket
from controlpanel.engine import backend as job_backend
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.validation import validate_job
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.validation import validate_notebook
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.sweeps.models import Sweep
from deploy.local import LocalBackend
from deploy.local.gpus import Gpu
from tests.fixtures.cli import cli_as
from tests.fixtures.jobs import H100_NAME

NO_GPU = (
    "This panel runs workloads on this machine, which has no GPU; choose a CPU flavor such as "
    "ai1-1-cpu."
)


def finetune_body(bucket: Bucket, flavor: str) -> dict[str, Any]:
    return {
        "preset": "finetune",
        "flavor": flavor,
        "volumes": [
            f"{bucket.name}@LOCAL/chat:/workspace/data",
            f"{bucket.name}@LOCAL/out:/workspace/output:rw",
        ],
        "params": {"base_model": "org/tiny", "max_steps": 10},
    }


def test_the_api_refuses_a_gpu_flavor_of_every_kind_on_a_machine_without_gpus(
    owner_api: APIClient, data_bucket: Bucket, cpu_machine: Any
) -> None:
    bucket = data_bucket.name
    asks = {
        "/api/v1/jobs/?project=alpha": (finetune_body(data_bucket, "h100-1-gpu"), "flavor"),
        "/api/v1/notebooks/?project=alpha": ({"image": "python", "flavor": "l4-1-gpu"}, "flavor"),
        "/api/v1/apps/": (
            {"project": "alpha", "model": f"{bucket}@LOCAL/chat", "flavor": "a100-1-gpu"},
            "flavor",
        ),
        "/api/v1/sweeps/?project=alpha": (
            {
                "name": "s",
                "base": finetune_body(data_bucket, "h200-1-gpu"),
                "space": {"learning_rate": {"values": [1e-4, 1e-3]}},
                "sampler": "grid",
                "max_trials": 2,
                "parallel": 1,
            },
            "base.flavor",
        ),
    }
    for url, (body, key) in asks.items():
        answer = owner_api.post(url, body, format="json")
        assert answer.status_code == 400, (url, answer.content)
        assert answer.json()[key] == [NO_GPU], (url, answer.json())
    assert not (
        Job.objects.exists()
        or Notebook.objects.exists()
        or App.objects.exists()
        or Sweep.objects.exists()
    )
    # The same body on a CPU flavor is taken: only the flavor was wrong.
    made = owner_api.post(
        "/api/v1/jobs/?project=alpha", finetune_body(data_bucket, "ai1-1-cpu"), format="json"
    )
    assert made.status_code == 201, made.content


def test_the_forms_say_so_beside_the_flavor_and_make_nothing(
    owner_client: Client, data_bucket: Bucket, cpu_machine: Any
) -> None:
    job_form = {
        "tab": "finetune",
        "ft-base_model": "org/model",
        "ft-data_volume": f"{data_bucket.name}@LOCAL/chat",
        "ft-output_volume": f"{data_bucket.name}@LOCAL/out",
        "ft-method": "lora",
        "ft-rank": "16",
        "ft-alpha": "32",
        "ft-learning_rate": "0.0002",
        "ft-batch_size": "4",
        "ft-grad_accum": "1",
        "ft-max_length": "512",
        "ft-flavor": "h100-1-gpu",
        "ft-gpu": "1",
    }
    page = owner_client.post("/p/alpha/jobs/new/?tab=finetune", job_form)
    assert page.status_code == 400  # the form again, with what is wrong
    assert page.context["finetune"].errors["flavor"] == [NO_GPU]
    assert html.escape(NO_GPU) in page.content.decode()
    notebook_form = {"name": "nb", "image": "python", "editor": "jupyterlab", "gpu": "1"}
    page = owner_client.post("/p/alpha/notebooks/new/", notebook_form | {"flavor": "l4-1-gpu"})
    assert page.status_code == 400  # the form again, with what is wrong
    assert page.context["form"].errors["flavor"] == [NO_GPU]
    assert not Job.objects.exists() and not Notebook.objects.exists()


@pytest.mark.parametrize(
    "url", ["/p/alpha/jobs/new/?tab=finetune", "/p/alpha/notebooks/new/", "/p/alpha/apps/new/"]
)
def test_the_forms_show_gpu_flavors_disabled_with_the_reason(
    owner_client: Client, panel_s3: Any, cpu_machine: Any, url: str
) -> None:
    page = owner_client.get(url).content.decode()
    h100 = page.split('value="h100-1-gpu"')[1].split("</option>")[0]
    assert "disabled" in h100 and html.escape(NO_GPU) in h100 and "(cannot run here)" in h100
    cpu = page.split('value="ai1-1-cpu"')[1].split("</option>")[0]
    assert "disabled" not in cpu.split(">")[0] and "selected" in cpu.split(">")[0]
    assert "which has no GPU: its GPU flavors are shown disabled." in page


def test_a_form_asked_to_start_on_a_gpu_flavor_starts_on_one_that_runs(
    owner_client: Client, panel_s3: Any, cpu_machine: Any
) -> None:
    Flavor.objects.filter(name="ai1-1-cpu").update(sort_order=99)  # GPU flavors come first
    page = owner_client.get("/p/alpha/notebooks/new/").content.decode()
    assert 'value="ai1-1-cpu" selected' in page
    assert 'value="l4-1-gpu" selected' not in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_exits_non_zero_with_the_sentence(
    live_server: Any, owner: Any, data_bucket: Bucket, cpu_machine: Any
) -> None:
    run = cli_as(owner, live_server.url)
    for args in (
        ["job", "run", "--flavor", "h100-1-gpu", "x/y:1"],
        ["notebook", "run", "--image", "python", "--flavor", "l4-1-gpu"],
    ):
        result = run(*args)
        assert result.exit_code != 0, result.output
        assert f"--flavor: {NO_GPU}" in result.output, result.output
    assert not Job.objects.exists() and not Notebook.objects.exists()


def test_a_machine_with_gpus_takes_its_model_and_refuses_others(
    project: Project, gpu_machine: Any
) -> None:
    notebook = {"image": "python", "flavor": "h100-1-gpu", "gpu": 4}
    assert validate_notebook(project=project, data=notebook).gpu == 4
    with pytest.raises(ValidationError) as other_model:
        validate_notebook(project=project, data=notebook | {"flavor": "l4-1-gpu", "gpu": 1})
    assert other_model.value.message_dict["flavor"] == [
        "This panel runs workloads on this machine, which has no L4 GPU (it has 8 × "
        f"{H100_NAME}); choose h100-1-gpu, or a CPU flavor such as ai1-1-cpu."
    ]


TOO_MANY = (
    "h100-1-gpu × 3 needs 3 H100 GPUs at once; this machine, where this panel runs workloads, "
    "has 2: ask for at most 2 units."
)


@pytest.fixture
def two_h100(tmp_path: Any, settings: Any) -> Any:
    settings.VAR_DIR = tmp_path
    two = [Gpu(0, H100_NAME), Gpu(1, H100_NAME)]
    job_backend.set_backend(LocalBackend(base_dir=tmp_path / "w", gpus=lambda: two))
    yield
    job_backend.set_backend(None)


def test_more_units_than_the_machine_has_gpus_are_refused(project: Project, two_h100: Any) -> None:
    data = {"image": "python", "flavor": "h100-1-gpu"}
    assert validate_notebook(project=project, data=data | {"gpu": 2}).gpu == 2
    with pytest.raises(ValidationError) as three:
        validate_notebook(project=project, data=data | {"gpu": 3})
    assert three.value.message_dict == {"gpu": [TOO_MANY]}


def test_the_api_refuses_more_units_than_the_machine_has_gpus(
    owner_api: APIClient, data_bucket: Bucket, two_h100: Any
) -> None:
    body = finetune_body(data_bucket, "h100-1-gpu") | {"gpu": 3}
    answer = owner_api.post("/api/v1/jobs/?project=alpha", body, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"gpu": [TOO_MANY]}
    assert not Job.objects.exists()


def test_a_mig_flavor_never_runs_on_this_machine(project: Project, gpu_machine: Any) -> None:
    Flavor.objects.create(
        name="h100-mig-1g",
        gpu_model="H100",
        vcpu_per_unit=2,
        memory_gib_per_unit=8,
        resource_key="nvidia.com/mig-1g.10gb",
    )
    with pytest.raises(ValidationError) as mig:
        validate_notebook(project=project, data={"image": "python", "flavor": "h100-mig-1g"})
    assert mig.value.message_dict["flavor"][0].startswith(
        "h100-mig-1g asks for MIG slices (nvidia.com/mig-1g.10gb), which only a Kubernetes "
        "cluster hands out."
    )


def test_the_kubernetes_backend_takes_every_gpu_flavor(project: Project, k8s_jobs: Any) -> None:
    for name in ("h100-1-gpu", "l4-1-gpu", "h200-1-gpu"):
        data = {"image": "x/y:1", "command": ["python"], "flavor": name, "gpu": 4}
        assert validate_job(project=project, data=data).gpu == 4
