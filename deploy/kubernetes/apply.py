"""Idempotent apply and delete.

Create first; on 409 read the existing object and compare the `ajuste.io/spec-hash` annotation
(a hash of the manifest we built, so server-side defaults never look like drift): equal means
adopt as is, different means patch what may change. Objects not labelled as ours, or labelled
as another install's (`ajuste.io/install`), are never touched (`ConflictError`); one made before
install ids is adopted and labelled. A 404 on delete means the work is already done.
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
    owner, ours = names.install_of(current), names.install_of(desired)
    if owner and owner != ours:
        raise ConflictError(
            f"{where} already exists and belongs to another Ajuste install ({owner})"
        )
    if current_meta.get("deletionTimestamp"):
        raise TransientError(f"{where} is still being deleted; try again shortly")
    wanted = meta["annotations"][names.SPEC_HASH]
    if (current_meta.get("annotations") or {}).get(names.SPEC_HASH) == wanted:
        return current
    if kind in IMMUTABLE_KINDS:
        if ours and not owner:  # made before install ids: its labels may change, not its spec
            return label_install(api, kind, current, ours)
        log.warning("%s differs from the request but cannot change; keeping it", where)
        return current
    return api.patch(kind, meta.get("namespace"), meta["name"], _patch_body(desired, current))


def label_install(api: KubeApi, kind: str, obj: Obj, install: str) -> Obj:
    """Adopt an object made before install ids: label it as `install`'s (only if it still is
    the version read: a 409 leaves it to the next apply). `kind` apart: listed items carry
    none."""
    meta = obj["metadata"]
    labels = {names.INSTALL: install}
    patch = {"metadata": {"labels": labels, "resourceVersion": meta.get("resourceVersion")}}
    try:
        return api.patch(kind, meta.get("namespace"), meta["name"], patch)
    except ApiException as exc:
        if exc.status != 409:
            raise
        return obj


def delete(api: KubeApi, kind: str, namespace: str | None, name: str, *, install: str = "") -> bool:
    """Delete one object; False when it was already gone, or is another install's (it is
    read first, then deleted on the condition that it is still the object read)."""
    try:
        if not install:
            api.delete(kind, namespace, name)
            return True
        found = api.read(kind, namespace, name)
        if not names.belongs(found, install):
            log.warning("%s %s/%s is another install's: not deleted", kind, namespace, name)
            return False
        return delete_found(api, found, kind)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def delete_labelled(
    api: KubeApi, kind: str, namespace: str, selector: str, *, install: str = ""
) -> int:
    """Delete every object of `kind` matching `selector` in `namespace` that `install` may
    treat as its own (`names.belongs`); how many went."""
    items, _ = api.list(kind, namespace, label_selector=selector)
    mine = [item for item in items if names.belongs(item, install)]
    return sum(delete_found(api, item, kind) for item in mine)


def delete_found(api: KubeApi, found: Obj, kind: str) -> bool:
    """Delete the object as listed or read: a 409 (it was replaced since, by a new object of
    the same name) or a 404 leaves it alone."""
    meta = found["metadata"]
    try:
        api.delete(kind, meta.get("namespace"), meta["name"], uid=meta.get("uid"))
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


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
    if desired["kind"] == "ResourceQuota":
        body["spec"] = {**body["spec"], "hard": _stale_limits_removed(desired, current)}
    return body


def _stale_limits_removed(desired: Obj, current: Obj) -> dict[str, Any]:
    """A quota no longer set (0: no limit; under Kueue, a line the cohort's borrowing must not
    meet) goes from the ResourceQuota: a merge patch alone would keep the old line."""
    wanted = (desired.get("spec") or {}).get("hard") or {}
    had = (current.get("spec") or {}).get("hard") or {}
    return {**{key: None for key in had if key not in wanted}, **wanted}


def _stale_keys_removed(desired: Obj, current: Obj) -> dict[str, Any]:
    """A merge patch only adds keys to `data`: null the keys we no longer ask for (a datastore's
    credentials once the project's last bucket there is gone), keep what we send."""
    wanted = {**(desired.get("data") or {}), **(desired.get("stringData") or {})}
    removed: dict[str, Any] = {key: None for key in current.get("data") or {} if key not in wanted}
    return {**removed, **(desired.get("data") or {})}
