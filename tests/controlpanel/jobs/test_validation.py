"""Bad input on every submission field gets a precise error under that field and saves nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from controlpanel.buckets.models import Bucket
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.jobs.validation import LOCAL_BACKEND_NOTE, LOCAL_COMMAND_NOTE, validate_job
from controlpanel.projects.models import Project
from deploy import images
from storage.volumes import render_volume_spec
from tests.fixtures.jobs import submit

GOOD = {
    "image": "registry.example.com/train:1",
    "command": ["python", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 2,
}


def errors_for(project: Project, **changes: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        validate_job(project=project, data=GOOD | changes)
    return caught.value.message_dict


def test_a_good_submission_is_cleaned(project: Project, data_bucket: Bucket, k8s_jobs: Any) -> None:
    spec = f"{data_bucket.name}@LOCAL/sets/v1:/workspace/data"
    job = validate_job(
        project=project,
        data=GOOD
        | {"volumes": [spec], "env": {"A": "1"}, "labels": {"team": "nlp"}, "timeout": "3600"},
    )
    assert [render_volume_spec(v) for v in job.volumes] == [
        f"{data_bucket.name}@LOCAL/sets/v1:/workspace/data:ro"
    ]
    assert (job.gpu, job.timeout, job.name) == (2, 3600, "train")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"flavor": "nope"}, "flavor", "Unknown flavor 'nope'"),
        ({"flavor": None}, "flavor", "Choose a flavor"),
        ({"gpu": 0}, "gpu", "at least 1"),
        ({"gpu": "two"}, "gpu", "whole number"),
        ({"gpu": True}, "gpu", "whole number"),
        ({"gpu": 5}, "gpu", "at most 4 units"),
        ({"image": ""}, "image", "Give a container image"),
        ({"image": "bad image"}, "image", "not a valid image reference"),
        ({"command": "python train.py"}, "command", "list of arguments"),
        ({"command": ["ok", 3]}, "command.1", "3 is not an argument"),
        ({"env": {"1BAD": "x"}}, "env.1BAD", "not a valid variable name"),
        ({"env": {"AWS_SECRET_ACCESS_KEY": "x"}}, "env.AWS_SECRET_ACCESS_KEY", "reserved"),
        ({"env": ["A=1"]}, "env", "NAME=value"),
        ({"labels": {"bad key!": "v"}}, "labels.bad key!", "up to 63"),
        ({"timeout": 5}, "timeout", "between 60 s"),
        ({"timeout": "soon"}, "timeout", "whole number"),
        ({"volumes": "x"}, "volumes", "list of specs"),
        ({"volumes": ["nobucket"]}, "volumes.0", "'nobucket' at character 9: missing '@"),
        ({"volumes": ["data@MARS:/workspace/d"]}, "volumes.0", "unknown datastore alias 'MARS'"),
        ({"volumes": ["theirs@LOCAL:/workspace/d"]}, "volumes.0", "not one of this project's"),
        ({"volumes": ["data@LOCAL:/etc/passwd"]}, "volumes.0", "/workspace"),
        ({"preset": "magic"}, "preset", "Unknown preset"),
        ({"params": {"rank": 8}}, "params", "only taken by a preset"),
        ({"name": "x" * 101}, "name", "at most 100"),
    ],
)
def test_bad_field(
    project: Project,
    panel_s3: Any,
    gpu_machine: Any,
    changes: dict[str, Any],
    field: str,
    message: str,
) -> None:
    errors = errors_for(project, **changes)
    assert field in errors, errors
    assert any(message in text for text in errors[field]), errors[field]


def test_gpus_over_the_project_quota_are_refused(
    project: Project, panel_s3: Any, gpu_machine: Any
) -> None:
    project.gpu_quota = 1
    project.save()
    assert "quota is 1: it could never start" in errors_for(project, gpu=2)["gpu"][0]


def test_duplicate_mount_paths(project: Project, data_bucket: Bucket) -> None:
    spec = f"{data_bucket.name}@LOCAL:/workspace/data"
    errors = errors_for(project, volumes=[spec, spec])
    assert "volumes.0" not in errors  # the later of the two has the problem
    assert "use the same mount path /workspace/data" in errors["volumes.1"][0]


def test_another_projects_bucket_cannot_be_mounted(
    project: Project, other_project: Project, panel_s3: Any
) -> None:
    Bucket.objects.create(project=other_project, datastore="LOCAL", name="secret-data")
    errors = errors_for(project, volumes=["secret-data@LOCAL:/workspace/data"])
    assert "not one of this project's buckets" in errors["volumes.0"][0]


def test_finetune_preset_checks(project: Project, data_bucket: Bucket) -> None:
    b = data_bucket.name
    data = {"preset": "finetune", "command": [], "image": "", "flavor": "ai1-1-cpu", "gpu": 1}
    errors = errors_for(project, **data, volumes=[f"{b}@LOCAL:/workspace/data"], params={"rank": 0})
    assert "volumes" in errors and "output bucket" in errors["volumes"][0]
    errors = errors_for(
        project,
        **data,
        params={"rank": 0, "base_model": "x/y"},
        volumes=[f"{b}@LOCAL:/workspace/data", f"{b}@LOCAL/o:/workspace/output:rw"],
    )
    assert errors["params.rank"] == ["--rank must be at least 1"]
    errors = errors_for(project, **data, params={"wat": 1}, volumes=[])
    assert "Unknown parameter" in errors["params.wat"][0]


def test_invalid_submission_saves_nothing(project: Project, owner: Any, panel_s3: Any) -> None:
    with pytest.raises(ValidationError):
        submit(project, owner, gpu=99)
    assert not Job.objects.exists()


def test_the_finetune_form_puts_each_volume_problem_beside_its_field(
    owner_client: Any, data_bucket: Bucket
) -> None:
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=finetune",
        {
            "tab": "finetune",
            "ft-base_model": "",
            "ft-model_volume": "nobucket@LOCAL/llama",
            "ft-data_volume": f"{data_bucket.name}@LOCAL/chat",
            "ft-output_volume": "other@NOWHERE/out",
            "ft-method": "lora",
            "ft-flavor": "ai1-1-cpu",
            "ft-gpu": "1",
        },
    )
    assert response.status_code == 400
    form = response.context["finetune"]
    assert "nobucket" in " ".join(form.errors["model_volume"])
    assert "unknown datastore alias 'NOWHERE'" in " ".join(form.errors["output_volume"])
    assert "data_volume" not in form.errors
    assert not Job.objects.exists()


def test_a_custom_image_is_refused_at_submit_on_the_local_backend(
    project: Project, owner: Any, owner_api: Any, owner_client: Any, local_jobs: Any
) -> None:
    """It used to be accepted, then failed at once ('needs the Kubernetes backend')."""
    refusal = f"registry.example.com/train:1 cannot run here. {LOCAL_BACKEND_NOTE}"
    assert errors_for(project, flavor="ai1-1-cpu", gpu=1) == {"image": [refusal]}
    api = owner_api.post("/api/v1/jobs/?project=alpha", GOOD | {"flavor": "ai1-1-cpu"}, "json")
    assert (api.status_code, api.json()) == (400, {"image": [refusal]})
    page = owner_client.post(
        "/p/alpha/jobs/new/?tab=custom",
        {"tab": "custom", "c-image": "x/y:1", "c-flavor": "ai1-1-cpu", "c-gpu": "1"},
    )
    assert page.status_code == 400
    assert page.context["custom"].errors["image"] == [
        f"x/y:1 cannot run here. {LOCAL_BACKEND_NOTE}"
    ]
    assert not Job.objects.exists()
    # The fine-tune image with a command of one's own: a shell on the panel's machine.
    builtin = {"image": images.FINETUNE_IMAGE, "command": ["bash", "-c", "id"]}
    assert errors_for(project, flavor="ai1-1-cpu", gpu=1, **builtin) == {
        "command": [LOCAL_COMMAND_NOTE]
    }


def test_the_preset_may_not_set_loader_variables_on_the_local_backend(
    project: Project, local_jobs: Any, data_bucket: Bucket
) -> None:
    volumes = [
        f"{data_bucket.name}@LOCAL/chat:/workspace/data",
        f"{data_bucket.name}@LOCAL/runs:/workspace/output:rw",
    ]
    data = {
        "preset": "finetune",
        "flavor": "ai1-1-cpu",
        "volumes": volumes,
        "params": {"base_model": "org/tiny"},
    }
    with pytest.raises(ValidationError) as caught:
        validate_job(project=project, data=data | {"env": {"LD_PRELOAD": "/workspace/data/x.so"}})
    assert caught.value.message_dict == {
        "env": ["The local backend does not let a job set LD_PRELOAD."]
    }
    assert validate_job(project=project, data=data | {"env": {"WANDB_MODE": "off"}}).preset


def test_the_custom_image_tab_says_so_on_the_local_backend_only(
    owner_client: Any, local_jobs: Any
) -> None:
    note = f'data-testid="backend-note">{LOCAL_BACKEND_NOTE}</p>'
    assert note in owner_client.get("/p/alpha/jobs/new/?tab=custom").content.decode()
    assert "backend-note" not in owner_client.get("/p/alpha/jobs/new/").content.decode()


def test_the_kubernetes_backend_takes_custom_images_without_a_note(
    project: Project, owner_client: Any, k8s_jobs: Any
) -> None:
    assert validate_job(project=project, data=GOOD).image == GOOD["image"]
    assert "backend-note" not in owner_client.get("/p/alpha/jobs/new/?tab=custom").content.decode()


def test_the_finetune_preset_refuses_gpus_its_cuda_build_cannot_run(
    project: Project, k8s_jobs: Any
) -> None:
    finetune = {"preset": "finetune", "image": None, "command": [], "gpu": 1,
                "params": {"base_model": "mistralai/Mistral-7B-v0.1"}}  # fmt: skip
    refused = errors_for(project, **finetune, flavor="v100s-1-gpu")
    assert "compute capability 7.5 or newer; v100s-1-gpu's V100S has 7.0" in refused["flavor"][0]
    with pytest.raises(ValidationError) as other:  # a flavor it runs on: no flavor error
        validate_job(project=project, data=GOOD | finetune | {"flavor": "l4-1-gpu"})
    assert "flavor" not in other.value.message_dict
    # A custom image on the same flavor is the user's call.
    assert validate_job(project=project, data=GOOD | {"flavor": "v100s-1-gpu", "gpu": 1}).gpu == 1


def _secret(project: Project, name: str = "hf_prod", value: str = "hf-VALUE-123") -> None:
    from controlpanel.projects.models import ProjectSecret

    ProjectSecret.objects.create(project=project, name=name, value=value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("secret:nope", "HF_TOKEN: this project has no secret named nope;"),
        ("secret:bad-name", "HF_TOKEN: 'bad-name' is not a secret name."),
        ("secret:", "HF_TOKEN: '' is not a secret name."),
    ],
)
def test_an_env_value_naming_an_unknown_secret_is_refused(
    project: Project, other_project: Project, panel_s3: Any, value: str, message: str
) -> None:
    _secret(other_project, "nope")  # another project's secret is not this one's
    errors = errors_for(project, env={"HF_TOKEN": value})
    assert [m for m in errors["env.HF_TOKEN"] if m.startswith(message)], errors


def test_a_secret_reference_is_stored_as_typed_and_launched_by_reference(
    project: Project, owner: Any, panel_s3: Any, k8s_cluster: Any, k8s_jobs: Any
) -> None:
    """The job keeps `secret:hf_prod`; the cluster gets the value in the project's Secret and
    the Job a secretKeyRef, never the value."""
    from controlpanel.engine.admission import admit_jobs
    from controlpanel.engine.backend import job_ref
    from controlpanel.engine.reconcile import reconcile
    from deploy import names

    _secret(project)
    job = submit(project, owner, env={"HF_TOKEN": "secret:hf_prod", "A": "1"})
    assert job.env == {"HF_TOKEN": "secret:hf_prod", "A": "1"}
    assert admit_jobs(project_id=project.pk) == [str(job.pk)]
    reconcile(str(job.pk))
    k8s_job = k8s_cluster.get("jobs", project.namespace, names.job_name(job_ref(job)))
    assert "hf-VALUE-123" not in repr(k8s_job)
    assert k8s_job["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "ajuste-project-secrets", "key": "hf_prod"}},
        },
    ]
    secret = k8s_cluster.get("secrets", project.namespace, "ajuste-project-secrets")
    assert secret is not None and "hf_prod" in (secret.get("data") or secret.get("stringData"))


def test_a_secret_deleted_before_launch_fails_the_run_with_the_reason(
    project: Project, owner: Any, panel_s3: Any, k8s_cluster: Any, k8s_jobs: Any
) -> None:
    from controlpanel.engine.admission import admit_jobs
    from controlpanel.engine.reconcile import reconcile
    from controlpanel.projects.models import ProjectSecret

    _secret(project)
    job = submit(project, owner, env={"HF_TOKEN": "secret:hf_prod"})
    ProjectSecret.objects.filter(project=project).delete()
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert k8s_cluster.list("jobs") == []  # nothing was created
    last = job.events.order_by("-at", "-pk").first()
    assert last is not None
    assert last.reason == "not started: the project has no secret named hf_prod (env references it)"
