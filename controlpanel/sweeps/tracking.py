"""The optional export of finished fine-tunes to an MLflow tracking server
(`MLFLOW_TRACKING_URI`): one experiment per project (`ajuste/<slug>`), one MLflow run per
adapter with the job's parameters, the loss at each logged step, the final and held-out loss,
and tags naming the adapter's location, the job and the data digest. MLflow stays MLflow:
this only writes to it, with its own client."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

from controlpanel.sweeps.models import Adapter

MAX_BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics a call


def experiment_name(slug: str) -> str:
    return f"ajuste/{slug}"


def adapter_export(*, adapter: Adapter, points: dict[str, float]) -> str:
    """Write the adapter's run to the tracking server; its MLflow run id."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=settings.MLFLOW_TRACKING_URI)
    name = experiment_name(adapter.project.slug)
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    run = client.create_run(experiment_id, run_name=adapter.name, tags=_tags(adapter))
    run_id = run.info.run_id
    now = int(time.time() * 1000)
    params = [Param(key, str(value)[:500]) for key, value in sorted(adapter.params.items())]
    metrics = [Metric("loss", v, now, int(step)) for step, v in sorted(points.items(), key=_step)]
    for name_, value in (("final_loss", adapter.final_loss), ("eval_loss", adapter.eval_loss)):
        if value is not None:
            metrics.append(Metric(name_, value, now, 0))
    client.log_batch(run_id, params=params)
    for start in range(0, len(metrics), MAX_BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + MAX_BATCH])
    client.set_terminated(run_id)
    return str(run_id)


def _step(item: tuple[str, float]) -> int:
    return int(item[0])


def _tags(adapter: Adapter) -> dict[str, Any]:
    return {
        "ajuste.adapter": adapter.location,
        "ajuste.job": str(adapter.job_id or ""),
        "ajuste.run": str(adapter.run),
        "ajuste.base_model": adapter.base_model,
        "ajuste.data_digest": adapter.data_digest,
    }
