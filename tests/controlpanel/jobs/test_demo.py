"""`make run`'s first-run demo: the bootstrap fills a demo bucket and the form is pre-filled."""

from __future__ import annotations

from io import StringIO
from typing import Any

from django.core.management import call_command
from django.test import Client

from controlpanel.accounts.models import User
from controlpanel.jobs.demo import demo_form_initial
from controlpanel.jobs.validation import validate_job
from controlpanel.projects.models import Project
from storage.objects import iter_objects


def test_bootstrap_seeds_the_demo_once(
    db: Any, panel_s3: Any, monkeypatch: Any, tmp_path: Any, settings: Any
) -> None:
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a-long-demo-password-1")
    out = StringIO()
    call_command("bootstrap", "--demo", stdout=out)
    assert "filled the demo bucket" in out.getvalue()
    keys = {o.key for o in iter_objects(panel_s3, bucket="demo")}
    assert {"tiny-llama/config.json", "chat/train.jsonl"} <= keys
    again = StringIO()
    call_command("bootstrap", "--demo", stdout=again)
    assert "filled" not in again.getvalue()

    demo = Project.objects.get(slug="demo")
    initial = demo_form_initial(project=demo)
    assert initial["model_volume"] == "demo@LOCAL/tiny-llama"
    # What the pre-filled form submits is a valid job.
    data = {
        "preset": "finetune",
        "flavor": "ai1-1-cpu",
        "gpu": 1,
        "params": {"max_steps": initial["max_steps"]},
        "volumes": [
            f"{initial['model_volume']}:/workspace/model",
            f"{initial['data_volume']}:/workspace/data",
            f"{initial['output_volume']}:/workspace/output:rw",
        ],
    }
    assert validate_job(project=demo, data=data).preset == "finetune"
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    page = client.get("/p/demo/jobs/new/").content.decode()
    assert 'value="demo@LOCAL/tiny-llama"' in page
