"""Issue #16 end to end on the local backend (real worker, beat and watcher processes): a tiny
Llama and a LoRA adapter in a project bucket become an app through the API; the official
`openai` client gets a chat answer (whole and streamed) and a completion through the panel's
URL with a project member's API token; without a token, with a wrong one, or with another
project's member's token the call is refused and never reaches the server; stopped and started,
the app answers at the same URL. The token never appears in the server's log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from controlpanel.accounts.services import token_create
from controlpanel.projects.models import Project
from controlpanel.workloads.backend import job_ref
from controlpanel.workloads.models import App
from storage.sync import push
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import api_client_for


def tiny_model_and_adapter(root: Path) -> tuple[Path, Path]:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.demo import make_demo_assets

    assets = make_demo_assets(root, examples=8)
    model = AutoModelForCausalLM.from_pretrained(assets.model_dir)
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    lora.save_pretrained(root / "adapter")
    return assets.model_dir, root / "adapter"


def upload(s3: Any, bucket: str, prefix: str, directory: Path) -> None:
    spec = VolumeSpec(
        bucket=bucket, alias="LOCAL", prefix=prefix, mount_path="/workspace/x", mode=Mode.RW
    )
    assert not push(s3, spec, directory).failed


def wait_state(app: App, states: set[str], procs: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.refresh_from_db()
        if app.state in states:
            return
        assert app.state not in ("FAILED", "ERROR"), (app.state_reason, procs.logs()[-3000:])
        time.sleep(0.5)
    raise AssertionError(f"{app.state}: {app.state_reason}\n{procs.logs()[-3000:]}")


@pytest.mark.e2e
@pytest.mark.slow
def test_an_app_answers_the_openai_client_through_the_panel_and_only_with_a_project_token(
    live_server: Any,
    processes: Any,
    owner: Any,
    outsider: Any,
    project: Project,
    panel_s3: Any,
    local_jobs: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    settings.COMPUTE_BACKEND = "local"
    settings.SITE_URL = live_server.url
    bucket = project_bucket(project, panel_s3, "app-weights").name
    model_dir, adapter_dir = tiny_model_and_adapter(tmp_path / "assets")
    upload(panel_s3, bucket, "tiny-llama", model_dir)
    upload(panel_s3, bucket, "runs/1/adapter", adapter_dir)
    procs = processes(
        {
            "COMPUTE_BACKEND": "local",
            "AJUSTE_VAR_DIR": str(settings.VAR_DIR),
            "S3_ENDPOINT_URL": panel_s3.endpoint_url,
            "S3_ALIAS": "LOCAL",
            "S3_ACCESS_KEY": panel_s3.access_key,
            "S3_SECRET_KEY": panel_s3.secret_key,
        }
    )
    procs.worker()
    procs.beat()
    procs.watcher()
    api = api_client_for(owner)
    created = api.post(
        "/api/v1/apps/",
        {
            "project": "alpha",
            "name": "tiny chat",
            "model": f"{bucket}@LOCAL/tiny-llama",
            "adapter": f"{bucket}@LOCAL/runs/1/adapter",
            "flavor": "ai1-1-cpu",
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    app = App.objects.get(pk=body["id"])
    base_url = body["url"]
    assert base_url == f"{live_server.url}/a/alpha/{app.pk}/v1"
    assert body["config"]["model_name"] == "tiny-chat"
    _, raw = token_create(user=owner, name="app client")
    try:
        wait_state(app, {"RUNNING"}, procs)
        client = openai.OpenAI(base_url=base_url, api_key=raw, max_retries=0)
        assert [m.id for m in client.models.list()] == ["tiny-chat"]
        answer = client.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "Hello"}], max_tokens=8
        )
        assert answer.choices[0].message.role == "assistant"
        assert answer.choices[0].message.content and answer.usage.completion_tokens >= 1
        stream = client.chat.completions.create(
            model="tiny-chat",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=8,
            stream=True,
        )
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        assert "".join(pieces)
        completion = client.completions.create(model="tiny-chat", prompt="Q: hi", max_tokens=4)
        assert completion.choices[0].finish_reason in ("length", "stop")

        # Refused: no token, a wrong one, another project's member's (not even told it exists).
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base_url, api_key="ajt_wrong", max_retries=0).models.list()
        bare = httpx.post(f"{base_url}/chat/completions", json={"model": "tiny-chat"})
        assert bare.status_code == 401 and bare.headers["WWW-Authenticate"] == "Bearer"
        _, stranger = token_create(user=outsider, name="stranger")
        with pytest.raises(openai.NotFoundError):
            openai.OpenAI(base_url=base_url, api_key=stranger, max_retries=0).models.list()
        other_slug = base_url.replace("/a/alpha/", "/a/beta/")
        with pytest.raises(openai.NotFoundError):
            openai.OpenAI(base_url=other_slug, api_key=stranger, max_retries=0).models.list()

        # Stop: the URL says so; start: the same URL answers again.
        assert api.post(f"/api/v1/apps/{app.pk}/stop/").status_code == 200
        wait_state(app, {"STOPPED"}, procs)
        stopped = httpx.get(f"{base_url}/models", headers={"Authorization": f"Bearer {raw}"})
        assert stopped.status_code == 503
        assert api.post(f"/api/v1/apps/{app.pk}/start/").status_code == 200
        wait_state(app, {"RUNNING"}, procs)
        assert api.get(f"/api/v1/apps/{app.pk}/").json()["url"] == base_url
        assert [m.id for m in client.models.list()] == ["tiny-chat"]
        log = (Path(settings.VAR_DIR) / "workloads").rglob("output.log")
        assert all(raw not in path.read_text() and stranger not in path.read_text() for path in log)
    finally:
        procs.stop_all()
        local_jobs.delete_app(ref=job_ref(app))  # the detached server goes with its run
