"""What a job may mount: buckets of its own project, on known datastores."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError

from controlpanel.buckets.credentials import pod_datastore_configs
from controlpanel.buckets.selectors import datastore_list, project_bucket
from controlpanel.projects.models import Project
from deploy.types import DeployError, TransientError
from storage.datastore import DatastoreConfig
from storage.errors import StorageError, StorageUnavailable
from storage.volumes import VolumeSpec, VolumeSpecError, parse_volume_spec


def check_volume_access(*, project: Project, spec: VolumeSpec) -> None:
    """A volume names a known datastore and a bucket of this project (created or attached):
    a job never reaches another project's data through a volume."""
    known = {info.alias for info in datastore_list()}
    if spec.alias not in known:
        choices = ", ".join(sorted(known)) or "none configured"
        raise ValidationError(f"unknown datastore alias {spec.alias!r} (known: {choices}).")
    if project_bucket(project=project, datastore=spec.alias, name=spec.bucket) is None:
        raise ValidationError(
            f"bucket {spec.bucket!r} on {spec.alias} is not one of this project's buckets "
            "(create or attach it under Object Storage first)."
        )


def launch_refusal(*, project: Project, volumes: Sequence[str]) -> str | None:
    """Why a run of a job with these volume specs must not start now, or None.

    Specs are checked at submit, but a rerun or a long-queued job launches later: by then a
    bucket may have been deleted or detached and its name taken by another project, whose
    data the run would read (and an rwd push delete). So every launch checks again."""
    for index, text in enumerate(volumes, start=1):
        try:
            spec = parse_volume_spec(text)
        except VolumeSpecError as error:
            return f"volume {index}: {error}"
        if spec.alias not in {info.alias for info in datastore_list()}:
            return f"volume {index}: the datastore {spec.alias} is no longer configured"
        if project_bucket(project=project, datastore=spec.alias, name=spec.bucket) is None:
            return f"volume {index}: bucket {spec.bucket}@{spec.alias} is no longer this project's"
    return None


def project_datastores(*, project: Project) -> list[DatastoreConfig]:
    """The credentials this project's pods get, one per datastore its buckets live on (for its
    Secret): narrowed to its buckets where the datastore can (controlpanel.buckets.credentials).
    A datastore that does not answer is a TransientError (the launch is retried); one that
    refuses to issue keys is a DeployError (the run fails with the reason)."""
    try:
        return pod_datastore_configs(project=project)
    except StorageUnavailable as error:
        raise TransientError(f"the object store did not answer: {error.message}") from error
    except StorageError as error:
        raise DeployError(f"pod credentials could not be issued: {error.message}") from error
