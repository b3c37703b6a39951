"""Whether an app's weights are where it says, checked at submit (#32): a model folder that
does not exist, or holds no `config.json`, could only fail once pulled (the server's loader then
hides the cause behind a tokenizer error), after the app was queued. The bucket is listed here,
in the create's request (never in a GET), with the storage layer the bucket pages use; a
datastore that does not answer refuses nothing: the start then says what is wrong
(deploy/local/serve.py's `model_missing`)."""

from __future__ import annotations

from controlpanel.buckets.selectors import datastore_config
from storage.errors import BucketNotFound, StorageError
from storage.objects import list_objects, object_exists
from storage.volumes import VolumeSpec

MODEL_FILE = "config.json"  # what a transformers model folder holds (and vLLM reads first)


def weights_problem(*, model: VolumeSpec, adapter: VolumeSpec | None) -> tuple[str, str] | None:
    """(error key, sentence) when the model's folder (or the adapter's) is missing or the
    model's holds no config.json, else None."""
    problem = _folder_problem(model, needs=MODEL_FILE)
    if problem:
        return "model", problem
    problem = _folder_problem(adapter, needs="") if adapter else ""
    return ("adapter", problem) if problem else None


def _folder_problem(spec: VolumeSpec, *, needs: str) -> str:
    folder = f"{spec.prefix}/" if spec.prefix else ""
    where = f"{spec.bucket}/{folder}" if folder else f"bucket {spec.bucket}"
    on = f"on datastore {spec.alias}"
    try:
        config = datastore_config(spec.alias)
        if needs and object_exists(config, bucket=spec.bucket, key=f"{folder}{needs}"):
            return ""
        held = list_objects(config, bucket=spec.bucket, prefix=folder, delimiter="", page_size=1)
    except BucketNotFound:
        return f"The bucket {spec.bucket} does not exist {on}: create it, or name another."
    except (StorageError, LookupError):
        return ""
    if not held.objects:
        return (
            f"The folder {where} does not exist {on} (nothing is stored under it): upload the "
            "weights there first, or name the folder that holds them."
        )
    if needs:
        return (
            f"The folder {where} {on} holds no {needs}: it is not a transformers model folder. "
            f"Name the folder that holds the model's {needs} and weights."
        )
    return ""
