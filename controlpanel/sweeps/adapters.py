"""An adapter recorded when a fine-tune run ends DONE: what it wrote and where, its losses and
cost, and its data lineage, read from its output folder in the bucket (the pull left
`.ajuste/lineage.json` there, the fine-tune `metrics.jsonl`; storage/sync/lineage.py).

Runs in a Celery task (tasks.adapter_record), never in a request: it reads the bucket."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from controlpanel.buckets.selectors import datastore_config
from controlpanel.engine.datastores import launch_refusal
from controlpanel.engine.selectors import job_cost_estimate
from controlpanel.jobs.models import Job
from controlpanel.jobs.presets import DATA_PATH, MODEL_PATH, OUTPUT_PATH
from controlpanel.jobs.states import JobState
from controlpanel.sweeps.models import Adapter
from controlpanel.sweeps.selectors import final_loss
from storage.errors import StorageError
from storage.objects import read_object
from storage.sync.lineage import LINEAGE_PATH, LineageError, changed_keys, read_lineage
from storage.volumes import VolumeSpec, parse_volume_spec, render_volume_spec
from training.protocol import read_event
from training.snapshot import Snapshot

MAX_LINEAGE_BYTES = 64 << 20
MAX_METRICS_BYTES = 16 << 20


def where(spec: VolumeSpec, *below: str) -> str:
    """`bucket@ALIAS/prefix[/below]`, as the app form and the CLI take a folder."""
    base = render_volume_spec(spec).rsplit(":", 2)[0]
    return "/".join([base, *below])


def _key(spec: VolumeSpec, name: str) -> str:
    return f"{spec.prefix}/{name}" if spec.prefix else name


def _mounts(job: Job) -> dict[str, VolumeSpec]:
    return {spec.mount_path: spec for spec in (parse_volume_spec(t) for t in job.volumes)}


def adapter_record(*, job_id: Any, run: int) -> Adapter | None:
    """The adapter of the job's run, recorded once (again: the same row); None unless that
    run of a fine-tune ended DONE with an adapter."""
    job = Job.objects.select_related("project", "flavor").filter(pk=job_id).first()
    if job is None or job.run != run or job.preset != "finetune" or job.state != JobState.DONE:
        return None
    snapshot = Snapshot.from_json(job.progress)
    output = _mounts(job).get(OUTPUT_PATH)
    if output is None or not snapshot.adapter_path:
        return None
    below = snapshot.adapter_path.removeprefix(OUTPUT_PATH).strip("/") or "adapter"
    lineage, problem = _lineage(job, output)
    fields = {
        "project": job.project,
        "name": job.name,
        "base_model": _base_model(job),
        "params": dict(job.params or {}),
        "location": where(output, below),
        "final_loss": final_loss(job),
        "eval_loss": _eval_loss(job, output),
        "cost": job_cost_estimate(job=job),
        "lineage": lineage,
        "data_digest": next((v["digest"] for v in lineage if v["mount_path"] == DATA_PATH), ""),
        "lineage_problem": problem,
    }
    with transaction.atomic():
        adapter, _ = Adapter.objects.update_or_create(job=job, run=run, defaults=fields)
    return adapter


def _base_model(job: Job) -> str:
    model = _mounts(job).get(MODEL_PATH)
    return where(model) if model is not None else str((job.params or {}).get("base_model", ""))


def _read(job: Job, spec: VolumeSpec, name: str, limit: int) -> bytes:
    """An object of the job's output folder, once the bucket is still the project's."""
    refused = launch_refusal(project=job.project, volumes=[render_volume_spec(spec)])
    if refused:
        raise StorageError(refused)
    return read_object(
        datastore_config(spec.alias), bucket=spec.bucket, key=_key(spec, name), max_bytes=limit
    )


def _lineage(job: Job, output: VolumeSpec) -> tuple[list[dict[str, Any]], str]:
    """The run's lineage, or none and why."""
    try:
        return read_lineage(_read(job, output, LINEAGE_PATH, MAX_LINEAGE_BYTES)), ""
    except (StorageError, LineageError) as error:
        return [], f"no lineage: {error}"[:300]


def _eval_loss(job: Job, output: VolumeSpec) -> float | None:
    """The last held-out loss in the run's metrics.jsonl (None without an eval set)."""
    try:
        text = _read(job, output, "metrics.jsonl", MAX_METRICS_BYTES).decode("utf-8", "replace")
    except StorageError:
        return None
    found = None
    for line in text.splitlines():
        event = read_event(line)
        if event and event.get("event") == "eval" and event.get("eval_loss") is not None:
            found = float(event["eval_loss"])
    return found


def lineage_changes(*, before: Adapter, after: Adapter) -> list[dict[str, Any]]:
    """Which keys changed between two adapters' inputs, by mount path (only those that did)."""
    return [
        {
            "mount_path": c.mount_path,
            "added": list(c.added),
            "removed": list(c.removed),
            "changed": list(c.changed),
        }
        for c in changed_keys(before.lineage, after.lineage)
        if c
    ]


def lineage_json(adapter: Adapter) -> str:
    """The lineage as a downloadable document (what the pull wrote, checked)."""
    return json.dumps({"version": 1, "volumes": adapter.lineage}, indent=1)
