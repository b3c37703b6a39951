"""The credentials a project's pods get, per datastore: keys narrowed to the project's buckets
where the datastore can issue them (`CredentialMode`), its own keys where it cannot (`shared`).

`pod_datastore_configs(project=...)` is what the project Secret holds (through
`controlpanel.engine.datastores.project_datastores`); it issues, re-grants, renews and revokes
as the project's buckets change. Deleting a bucket narrows (or revokes) the project's key at
once (`_bucket_gone`), so a bucket name set free never stays reachable from the old project's
pods on the embedded store; STS keys cannot be revoked and keep their session policy until they
expire (at most `credential_duration_s`).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import DatabaseError, transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone

from controlpanel.buckets.models import (
    SHARED_BLAST_RADIUS,
    Bucket,
    CredentialMode,
    Datastore,
    PodCredential,
)
from controlpanel.buckets.selectors import DatastoreNotFound, datastore_config
from controlpanel.projects.models import Project
from storage import credentials
from storage.datastore import DatastoreConfig
from storage.errors import StorageError

log = logging.getLogger(__name__)

# An embedded grant is sent again after this long even when nothing changed: a store whose
# data directory was replaced learns the key again within this time.
REGRANT_AFTER = timedelta(minutes=10)


@dataclass(frozen=True)
class CredentialPolicy:
    """How one datastore hands out pod credentials (from its row, or the S3_* settings)."""

    mode: str
    role_arn: str = ""
    sts_endpoint_url: str = ""
    duration_s: int = 3600


def datastore_credential_policy(alias: str) -> CredentialPolicy:
    """The default datastore's policy comes from S3_CREDENTIAL_MODE and friends; a stored one's
    from its row."""
    if alias == settings.S3_ALIAS and settings.S3_ENDPOINT_URL:
        return CredentialPolicy(
            mode=settings.S3_CREDENTIAL_MODE,
            role_arn=settings.S3_ROLE_ARN,
            sts_endpoint_url=settings.S3_STS_ENDPOINT_URL,
            duration_s=settings.S3_CREDENTIAL_DURATION_S,
        )
    row = Datastore.objects.filter(alias=alias).first()
    if row is None:
        raise DatastoreNotFound(alias)
    return CredentialPolicy(
        mode=row.credential_mode,
        role_arn=row.role_arn,
        sts_endpoint_url=row.sts_endpoint_url,
        duration_s=row.credential_duration_s,
    )


def pod_datastore_configs(*, project: Project) -> list[DatastoreConfig]:
    """One config per datastore the project has buckets on, with the keys its pods get; the
    keys of datastores it has left are revoked. StorageError when a datastore refuses to
    issue narrowed keys (the caller fails the launch with that reason: never falls back to
    the shared keys)."""
    with transaction.atomic():
        # One issuer at once. NO KEY: a plain FOR UPDATE also blocks the FOR KEY SHARE that
        # every new row referring to the project takes at COMMIT, so each submission of the
        # project waited for the launches in flight (their cluster calls included).
        Project.objects.select_for_update(no_key=True).filter(pk=project.pk).first()
        buckets = _buckets_by_datastore(project)
        _revoke_others(project, keep=set(buckets))
        return [_pod_config(project, alias, names) for alias, names in sorted(buckets.items())]


def pod_credentials_revoke(*, project: Project) -> None:
    """Revoke every narrowed key of the project (its pods lose access at once on the embedded
    store; STS keys run out)."""
    with transaction.atomic():
        _revoke_others(project, keep=set())


def _buckets_by_datastore(project: Project) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for alias, name in Bucket.objects.filter(project=project).values_list("datastore", "name"):
        found[alias].append(name)
    return {alias: sorted(names) for alias, names in found.items()}


def _pod_config(project: Project, alias: str, buckets: list[str]) -> DatastoreConfig:
    root = datastore_config(alias)
    policy = datastore_credential_policy(alias)
    row = PodCredential.objects.filter(project=project, datastore=alias).first()
    if row is not None and row.mode != policy.mode:
        _revoke(row)
        row = None
    if policy.mode == CredentialMode.SHARED:
        return root
    if row is None or not _still_good(row, buckets):
        row = _issue(project, alias, root, policy, buckets, row)
    return replace(
        root,
        access_key=row.access_key,
        secret_key=row.secret_key,
        session_token=row.session_token,
    )


def _still_good(row: PodCredential, buckets: list[str]) -> bool:
    now = timezone.now()
    if row.buckets != buckets:
        return False
    if row.mode == CredentialMode.EMBEDDED_SCOPED:
        return now - row.issued_at < REGRANT_AFTER
    # STS: renewed once half its life is gone, so a pod launched now keeps it a while
    if row.expires_at is None:
        return False
    return now < row.issued_at + (row.expires_at - row.issued_at) / 2


def _issue(
    project: Project,
    alias: str,
    root: DatastoreConfig,
    policy: CredentialPolicy,
    buckets: list[str],
    row: PodCredential | None,
) -> PodCredential:
    values: dict[str, Any] = {"mode": policy.mode, "buckets": buckets, "issued_at": timezone.now()}
    if policy.mode == CredentialMode.EMBEDDED_SCOPED:
        if row is not None:
            access_key, secret_key = row.access_key, row.secret_key
        else:
            access_key, secret_key = credentials.new_key_pair(f"ajp{project.pk}")
        credentials.embedded_grant(
            root, access_key=access_key, secret_key=secret_key, buckets=buckets
        )
        values.update(access_key=access_key, secret_key=secret_key, session_token="")
        values["expires_at"] = None
    else:
        issued = credentials.assume_role(
            root,
            role_arn=policy.role_arn,
            session_name=f"ajuste-{project.slug}-{alias}",
            buckets=buckets,
            duration_s=policy.duration_s,
            sts_endpoint_url=policy.sts_endpoint_url,
        )
        values.update(
            access_key=issued.config.access_key,
            secret_key=issued.config.secret_key,
            session_token=issued.config.session_token,
            expires_at=issued.expires_at,
        )
    row, _ = PodCredential.objects.update_or_create(
        project=project, datastore=alias, defaults=values
    )
    return row


def _revoke_others(project: Project, *, keep: set[str]) -> None:
    for row in PodCredential.objects.filter(project=project).exclude(datastore__in=keep):
        _revoke(row)


def _revoke(row: PodCredential) -> None:
    """Revoke on the store (embedded) and forget. An STS key cannot be revoked: it expires."""
    if row.mode == CredentialMode.EMBEDDED_SCOPED:
        # a datastore that is itself gone took what it held with it
        with contextlib.suppress(DatastoreNotFound):
            credentials.embedded_revoke(datastore_config(row.datastore), access_key=row.access_key)
    row.delete()


@checks.register(checks.Tags.security, deploy=True)
def check_shared_credentials(**_: Any) -> list[checks.CheckMessage]:
    """`manage.py check --deploy` says when the default datastore hands pods its own keys
    (stored datastores say it on their admin page)."""
    if not settings.S3_ENDPOINT_URL or settings.S3_CREDENTIAL_MODE != CredentialMode.SHARED:
        return []
    return [
        checks.Warning(
            f"S3_CREDENTIAL_MODE=shared for {settings.S3_ALIAS}. {SHARED_BLAST_RADIUS}",
            hint="Set S3_CREDENTIAL_MODE=sts and S3_ROLE_ARN (AWS, MinIO, Ceph RGW).",
            id="ajuste.W101",
        )
    ]


# Not tagged `database`: every management command runs it, so the web pods' migrating init
# container and the other pods' wait for it refuse to start, as `check --deploy` does.
@checks.register(checks.Tags.security)
def check_shared_credentials_on_a_cluster(app_configs: Any, **_: Any) -> list[checks.CheckMessage]:
    """On a cluster, the default datastore's own keys in every pod with more than one project
    is an explicit choice: S3_SHARED_CREDENTIALS_ACKNOWLEDGED=1."""
    if (
        settings.COMPUTE_BACKEND != "kubernetes"
        or not settings.S3_ENDPOINT_URL
        or settings.S3_CREDENTIAL_MODE != CredentialMode.SHARED
        or settings.S3_SHARED_CREDENTIALS_ACKNOWLEDGED
    ):
        return []
    try:
        projects = Project.objects.count()
    except DatabaseError:  # not migrated yet: migrate runs the checks first
        return []
    if projects <= 1:
        return []
    return [
        checks.Error(
            f"S3_CREDENTIAL_MODE=shared for {settings.S3_ALIAS} with {projects} projects: every "
            f"job, notebook and app pod holds keys that reach every project's buckets.",
            hint="Set S3_CREDENTIAL_MODE=sts and S3_ROLE_ARN (AWS, MinIO, Ceph RGW), or "
            "S3_SHARED_CREDENTIALS_ACKNOWLEDGED=1 if every project is one trust domain "
            "(docs/deploy-kubernetes.md, day 1).",
            id="ajuste.E102",
        )
    ]


@receiver(post_delete, sender=Bucket, dispatch_uid="pod-credentials-bucket-gone")
def _bucket_gone(sender: type[Bucket], instance: Bucket, **_: Any) -> None:
    """A deleted or detached bucket leaves the project's narrowed key at once (after commit):
    its name is free, and another project may take it."""
    project_id = instance.project_id

    def narrow() -> None:
        project = Project.objects.filter(pk=project_id).first()
        if project is None:
            return
        try:
            pod_datastore_configs(project=project)
        except StorageError as error:  # the next launch tries again; the name is logged
            log.warning("could not narrow %s's pod credentials: %s", project.slug, error)

    transaction.on_commit(narrow)
