"""An app whose model folder does not exist is refused at submit (issue 32), not queued to fail
at start behind a tokenizer error: the bucket is listed through the storage layer, and the
refusal names the folder and the datastore under `model` (or `adapter`); nothing is made. The
API, the form and the CLI say the same sentence."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.served.models import App
from storage.datastore import DatastoreConfig
from storage.objects import put_object
from tests.fixtures.cli import cli_as
from tests.fixtures.panel import api_client_for, logged_in


def missing(bucket: str, folder: str) -> str:
    return (
        f"The folder {bucket}/{folder}/ does not exist on datastore LOCAL (nothing is stored "
        "under it): upload the weights there first, or name the folder that holds them."
    )


def no_config(bucket: str, folder: str) -> str:
    return (
        f"The folder {bucket}/{folder}/ on datastore LOCAL holds no config.json: it is not a "
        "transformers model folder. Name the folder that holds the model's config.json and "
        "weights."
    )


def api_data(bucket: Bucket, **extra: Any) -> dict[str, Any]:
    return {"project": "alpha", "name": "chat", "flavor": "ai1-1-cpu", **extra}


@pytest.mark.django_db
def test_the_api_refuses_a_missing_model_folder_and_a_folder_without_a_model(
    member: Any, data_bucket: Bucket, panel_s3: DatastoreConfig
) -> None:
    client = api_client_for(member)
    name = data_bucket.name
    absent = client.post(
        "/api/v1/apps/", api_data(data_bucket, model=f"{name}@LOCAL/no-such-model"), format="json"
    )
    assert absent.status_code == 400
    assert absent.json() == {"model": [missing(name, "no-such-model")]}
    # `chat/` exists (a training file) but is no model folder
    not_a_model = client.post(
        "/api/v1/apps/", api_data(data_bucket, model=f"{name}@LOCAL/chat"), format="json"
    )
    assert not_a_model.status_code == 400
    assert not_a_model.json() == {"model": [no_config(name, "chat")]}
    adapter = client.post(
        "/api/v1/apps/",
        api_data(data_bucket, model=f"{name}@LOCAL/tiny-llama", adapter=f"{name}@LOCAL/runs/9"),
        format="json",
    )
    assert adapter.status_code == 400
    assert adapter.json() == {"adapter": [missing(name, "runs/9")]}
    assert not App.objects.exists()
    # a prefix of a longer folder name is no folder: `tiny` is not `tiny-llama/`
    put_object(panel_s3, bucket=name, key="tiny-llama-2/config.json", data=b"{}")
    prefix = client.post(
        "/api/v1/apps/", api_data(data_bucket, model=f"{name}@LOCAL/tiny"), format="json"
    )
    assert prefix.json() == {"model": [missing(name, "tiny")]}
    made = client.post(
        "/api/v1/apps/",
        api_data(
            data_bucket, model=f"{name}@LOCAL/tiny-llama/", adapter=f"{name}@LOCAL/runs/1/adapter"
        ),
        format="json",
    )
    assert made.status_code == 201, made.json()
    assert App.objects.get().params["model"] == f"{name}@LOCAL/tiny-llama"


@pytest.mark.django_db
def test_the_form_refuses_a_missing_model_folder_and_keeps_what_was_typed(
    member: Any, data_bucket: Bucket
) -> None:
    client = logged_in(member)
    form = {
        "name": "chat",
        "model": f"{data_bucket.name}@LOCAL/nothing-here",
        "flavor": "ai1-1-cpu",
        "gpu": "1",
        "scaling": "fixed",
        "replicas": "1",
        "probe_path": "/health",
        "port": "8000",
    }
    refused = client.post("/p/alpha/apps/new/", form)
    assert refused.status_code == 400
    page = refused.content.decode()
    assert missing(data_bucket.name, "nothing-here") in page
    assert f'value="{data_bucket.name}@LOCAL/nothing-here"' in page
    assert not App.objects.exists()
    made = client.post(
        "/p/alpha/apps/new/", {**form, "model": f"{data_bucket.name}@LOCAL/tiny-llama"}
    )
    assert made.status_code == 302
    assert App.objects.get().name == "chat"


@pytest.mark.django_db(transaction=True)
def test_the_cli_says_which_flag_and_which_folder(
    live_server: Any, owner: Any, data_bucket: Bucket
) -> None:
    run = cli_as(owner, live_server.url)
    model = f"{data_bucket.name}@LOCAL/gone"
    result = run("app", "create", "--model", model, "--flavor", "ai1-1-cpu")
    assert result.exit_code != 0
    assert f"--model: {missing(data_bucket.name, 'gone')}" in result.output
    assert not App.objects.exists()
