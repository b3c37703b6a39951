"""Idempotent apply and delete.

Create first; on 409 read the existing object and compare the `ajuste.io/spec-hash` annotation
(a hash of the manifest we built, so server-side defaults never look like drift): equal means
adopt as is, different means patch what may change. Objects not labelled as ours are never
touched (`ConflictError`), and a 404 on delete means the work is already done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.types import ConflictError, DeployError, TransientError

log = logging.getLogger(__name__)

# Kinds whose spec never changes after creation: a changed request means a new run.
IMMUTABLE_KINDS = frozenset({"Job", "PersistentVolumeClaim"})
# Spec fields the API refuses to change on an existing object.
FROZEN_SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "StatefulSet": ("selector", "serviceName", "volumeClaimTemplates"),
    "Service": ("clusterIP", "clusterIPs"),
}


def spec_hash(manifest: Obj) -> str:
    """A stable hash of what we asked for."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def with_hash(manifest: Obj) -> Obj:
    """The manifest with its own hash in `metadata.annotations`."""
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), names.SPEC_HASH: spec_hash(manifest)}
    return {**manifest, "metadata": meta}


# What the API server answers to a request it will refuse again, however often it is sent:
# the workload ends in ERROR with the server's reason instead of being re-sent forever.
REFUSED_STATUSES = frozenset({400, 403, 413, 415, 422})


def apply(api: KubeApi, manifest: Obj) -> Obj:
    """Make the object exist as `manifest` says; safe to call any number of times."""
    desired = with_hash(manifest)
    try:
        return api.create(desired)
    except ApiException as exc:
        if exc.status != 409:
            raise refused(exc, desired) from exc
    meta = desired["metadata"]
    current = api.read(desired["kind"], meta.get("namespace"), meta["name"])
    try:
        return adopt(api, current, desired)
    except ApiException as exc:
        raise refused(exc, desired) from exc


def refused(exc: ApiException, desired: Obj) -> Exception:
    """A `DeployError` with the server's message for a request it will always refuse; the
    exception itself otherwise (404, 409 and 5xx are for the caller and the retries)."""
    if exc.status not in REFUSED_STATUSES:
        return exc
    message = exc.reason or ""
    with contextlib.suppress(ValueError, AttributeError):  # a body that is not a Status
        message = json.loads(exc.body or "{}").get("message") or message
    meta = desired["metadata"]
    return DeployError(
        f"the cluster refused {desired['kind']} {meta['name']} (HTTP {exc.status}): {message}"
    )


def adopt(api: KubeApi, current: Obj, desired: Obj) -> Obj:
    """Take over an existing object of ours, patching it when our request changed."""
    kind, meta = desired["kind"], desired["metadata"]
    where = f"{kind} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")
    current_meta = current.get("metadata") or {}
    if (current_meta.get("labels") or {}).get(names.MANAGED_BY) != names.MANAGER:
        raise ConflictError(f"{where} already exists and is not managed by Ajuste")
    if current_meta.get("deletionTimestamp"):
        raise TransientError(f"{where} is still being deleted; try again shortly")
    wanted = meta["annotations"][names.SPEC_HASH]
    if (current_meta.get("annotations") or {}).get(names.SPEC_HASH) == wanted:
        return current
    if kind in IMMUTABLE_KINDS:
        log.warning("%s differs from the request but cannot change; keeping it", where)
        return current
    return api.patch(kind, meta.get("namespace"), meta["name"], _patch_body(desired, current))


def delete(api: KubeApi, kind: str, namespace: str | None, name: str) -> bool:
    """Delete one object; False when it was already gone."""
    try:
        api.delete(kind, namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def delete_labelled(api: KubeApi, kind: str, namespace: str, selector: str) -> int:
    """Delete every object of `kind` matching `selector` in `namespace`; how many went."""
    items, _ = api.list(kind, namespace, label_selector=selector)
    return sum(delete(api, kind, namespace, item["metadata"]["name"]) for item in items)


def _patch_body(desired: Obj, current: Obj) -> Obj:
    meta = desired["metadata"]
    body: dict[str, Any] = {
        "metadata": {"labels": meta.get("labels", {}), "annotations": meta.get("annotations", {})}
    }
    for key, value in desired.items():
        if key not in ("apiVersion", "kind", "metadata"):
            body[key] = value
    frozen = FROZEN_SPEC_FIELDS.get(desired["kind"], ())
    if frozen and isinstance(body.get("spec"), dict):
        body["spec"] = {k: v for k, v in body["spec"].items() if k not in frozen}
    if desired["kind"] in ("Secret", "ConfigMap"):
        body["data"] = _stale_keys_removed(desired, current)
    return body


def _stale_keys_removed(desired: Obj, current: Obj) -> dict[str, Any]:
    """A merge patch only adds keys to `data`: null the keys we no longer ask for (a datastore's
    credentials once the project's last bucket there is gone), keep what we send."""
    wanted = {**(desired.get("data") or {}), **(desired.get("stringData") or {})}
    removed: dict[str, Any] = {key: None for key in current.get("data") or {} if key not in wanted}
    return {**removed, **(desired.get("data") or {})}
