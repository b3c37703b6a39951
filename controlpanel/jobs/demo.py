"""The first-run demo: a `demo` bucket in the `demo` project holding a tiny base model and a
small chat dataset, so that a new user can run the fine-tune preset on `ai1-1-cpu` with the
local backend and see it reach DONE in about a minute."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from django.utils import timezone

from controlpanel.buckets.models import Bucket
from controlpanel.buckets.selectors import datastore_config, default_datastore_alias
from controlpanel.buckets.services import bucket_create, bucket_stats_request
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project, Role
from storage.sync import push
from storage.volumes import Mode, VolumeSpec
from training.demo import make_demo_assets

DEMO_BUCKET = "demo"
MODEL_PREFIX = "tiny-llama"
DATA_PREFIX = "chat"
OUTPUT_PREFIX = "runs"
# Form values for the demo: small enough to finish in about a minute on two CPU cores.
DEMO_FORM = {"max_steps": 12, "batch_size": 4, "max_length": 256}


def demo_form_initial(*, project: Project) -> dict[str, Any]:
    """Pre-filled fine-tune fields when the project has the demo bucket, else nothing."""
    bucket = Bucket.objects.filter(project=project, name=DEMO_BUCKET).first()
    if bucket is None:
        return {}
    where = f"{DEMO_BUCKET}@{bucket.datastore}"
    return DEMO_FORM | {
        "name": "demo fine-tune",
        "model_volume": f"{where}/{MODEL_PREFIX}",
        "data_volume": f"{where}/{DATA_PREFIX}",
        # a folder per submission: each try keeps its own adapter and checkpoints
        "output_volume": f"{where}/{OUTPUT_PREFIX}/{timezone.now():%Y%m%d-%H%M%S}",
        "flavor": "ai1-1-cpu",
    }


def seed_demo(*, project: Project, admin: Any) -> Bucket | None:
    """Create and fill the demo bucket once; None when it already exists."""
    if Bucket.objects.filter(project=project, name=DEMO_BUCKET).exists():
        return None
    access = ProjectAccess(project=project, role=Role.MANAGER, is_admin=True)
    bucket = bucket_create(
        access=access, by=admin, name=DEMO_BUCKET, datastore=default_datastore_alias()
    )
    config = datastore_config(bucket.datastore)
    with tempfile.TemporaryDirectory() as tmp:
        assets = make_demo_assets(Path(tmp))
        for prefix, directory in (
            (MODEL_PREFIX, assets.model_dir),
            (DATA_PREFIX, assets.data_file.parent),
        ):
            spec = VolumeSpec(
                bucket=bucket.name,
                alias=bucket.datastore,
                prefix=prefix,
                mount_path="/workspace/demo",
                mode=Mode.RW,
            )
            stats = push(config, spec, directory)
            if stats.failed:
                raise RuntimeError(f"uploading the demo {prefix} failed: {stats.failures}")
    bucket_stats_request(bucket=bucket)  # the page then counts what was just uploaded
    return bucket
