"""What a fine-tune's dataset volume must hold, checked at submit (#32): the preset trains on
the `*.jsonl` files under /workspace/data (training/data/jsonl.find_files), so a prefix with
none of them could only fail once pulled, after its minute was billed. The bucket is listed
here, in the submit's request (never in a GET); a datastore that does not answer refuses
nothing: the launch's own checks and the run then say what is wrong."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from controlpanel.buckets.selectors import datastore_config
from controlpanel.jobs.presets import DATA_PATH
from storage.errors import StorageError
from storage.objects import iter_objects
from storage.volumes import VolumeSpec
from training.data.jsonl import EVAL_PREFIXES

# A listing stops here: a prefix this big without a training file is left to the run.
MAX_KEYS_LISTED = 10_000


def is_training_file(key: str) -> bool:
    """A key the preset trains on: `*.jsonl`, not hidden, not an eval/valid file."""
    name = key.rsplit("/", 1)[-1]
    return (
        name.endswith(".jsonl")
        and not name.startswith(".")
        and not name.lower().startswith(EVAL_PREFIXES)
    )


def dataset_problem(volumes: Sequence[VolumeSpec]) -> tuple[str, str] | None:
    """(error key, sentence) when the dataset volume holds no training file, else None."""
    for index, spec in enumerate(volumes):
        if spec.mount_path != DATA_PATH:
            continue
        prefix = f"{spec.prefix}/" if spec.prefix else ""
        try:
            keys = iter_objects(datastore_config(spec.alias), bucket=spec.bucket, prefix=prefix)
            listed = list(itertools.islice(keys, MAX_KEYS_LISTED))
        except (StorageError, LookupError):
            return None
        if any(is_training_file(info.key) for info in listed) or len(listed) >= MAX_KEYS_LISTED:
            return None
        where = f"{spec.bucket}/{prefix}" if prefix else f"bucket {spec.bucket}"
        held = "is empty" if not listed else "holds no *.jsonl training file"
        return (
            f"volumes.{index}",
            f"The dataset at {DATA_PATH} ({where}) {held}: the fine-tune preset trains on "
            "the *.jsonl files under it (eval*/valid* files are its eval set). Upload them "
            "first, or mount the prefix that holds them.",
        )
    return None
