"""What the sweep does to this install's runs that no row of its database names (orphans: made
after the dump a database was restored from, or by a transaction that rolled back): first what
holds the nodes goes (`stop_orphan`: pods and their controllers, the workspace claim kept),
then, after a grace long enough to notice a restore, the rest (`delete_orphan`).

Only objects labelled with this install are listed (`install_selector` and the run's labels):
an object of another install, or one made before install ids (no label at all), is never
deleted here, whatever the panel's rows say."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from deploy import kinds, names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.apply import delete_found
from deploy.types import WorkloadRef

WORKSPACE = "PersistentVolumeClaim"


def run_selector(ref: WorkloadRef, install: str) -> str:
    """The objects of one run that carry this install's label (never those without one); a
    backend without an identity (tests) has every labelled object of the run."""
    return names.selector({**names.selector_labels(ref), **names.install_labels(install)})


def installed_objects(api: KubeApi, kind: str, ref: WorkloadRef, install: str) -> list[Obj]:
    """This install's objects of `kind` of the run; none where the API has no such kind (a
    cluster without KEDA)."""
    try:
        items, _ = api.list(kind, ref.namespace, label_selector=run_selector(ref, install))
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return [item for item in items if not install or names.install_of(item) == install]


def stop_orphan(api: KubeApi, ref: WorkloadRef, *, install: str) -> bool:
    """Delete what runs of an orphan run, keeping its workspace claim; True when a claim of
    this install is left (a workspace waiting for `delete_orphan`)."""
    for kind in kinds.spec(ref.kind).running:
        for obj in installed_objects(api, kind, ref, install):
            delete_found(api, obj, kind)
    return bool(installed_objects(api, WORKSPACE, ref, install))


def delete_orphan(api: KubeApi, ref: WorkloadRef, *, install: str) -> int:
    """Delete everything of this install left of an orphan run, its workspace claim included;
    how many objects went."""
    deleted = 0
    for kind in (*kinds.spec(ref.kind).running, WORKSPACE):
        found = installed_objects(api, kind, ref, install)
        deleted += sum(delete_found(api, obj, kind) for obj in found)
    return deleted
