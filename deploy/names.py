"""Deterministic, RFC 1123-valid names and the labels every Ajuste object carries.

Label keys (stable; selectors and RBAC-free lookups rely on them):
- `app.kubernetes.io/managed-by: ajuste` on every object we create;
- `ajuste.io/project`: the project slug; `ajuste.io/kind`: `job`, `notebook`, `app` or `project`;
- `ajuste.io/id`: the panel's id of the workload; `ajuste.io/run`: the job run number;
- `ajuste.io/component`: which part of a workload (`main`, `push`, `workspace`, `notebook`,
  `app`);
- `ajuste.io/install`: the install that made the object (a stable id kept in its database).
  Objects made before the label existed carry none: the install whose database has their row
  adopts them (and labels them as it applies them again); no install ever deletes them as
  orphans, since nothing says whose they are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from deploy import kinds
from deploy.types import WorkloadRef

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "ajuste"
PROJECT = "ajuste.io/project"
KIND = "ajuste.io/kind"
ID = "ajuste.io/id"
RUN = "ajuste.io/run"
COMPONENT = "ajuste.io/component"
SPEC_HASH = "ajuste.io/spec-hash"
USER_LABELS = "ajuste.io/user-labels"
STOP_REQUESTED = "ajuste.io/stop-requested"
URL = "ajuste.io/url"
# On an app's Deployment: "true" at zero replicas because it was stopped (not scaled to zero).
STOPPED = "ajuste.io/stopped"
INSTALL = "ajuste.io/install"

_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")


def dns_label(text: str, *, max_len: int = 63) -> str:
    """`text` as a DNS-1123 label; a short hash is appended whenever anything had to change,
    so two different ids never collapse to the same name."""
    clean = _INVALID.sub("-", text.lower()).strip("-")
    if clean == text and 0 < len(clean) <= max_len:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[: max_len - 9].strip('-')}-{digest}".strip("-")


def label_value(text: str) -> str:
    """`text` as a label value (63 chars, alphanumeric at both ends), hashed if it changed."""
    clean = _LABEL_INVALID.sub("-", text).strip("-_.")
    if clean == text and len(clean) <= 63:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[:54].strip('-_.')}-{digest}".strip("-")


def job_name(ref: WorkloadRef) -> str:
    """The Job of one run: `job-<id>-r<run>`; kept short enough for the pod names under it."""
    return dns_label(f"job-{ref.id}-r{ref.run}", max_len=52)


def workspace_claim_name(ref: WorkloadRef) -> str:
    """The per-run PVC that holds /workspace of a job with rw volumes."""
    return f"{job_name(ref)}-ws"


def push_job_name(ref: WorkloadRef, attempt: int) -> str:
    """The finalize Job that pushes rw volumes, one per attempt."""
    return f"{job_name(ref)}-push-{attempt}"


def notebook_name(ref: WorkloadRef) -> str:
    """StatefulSet, Service and Ingress of a notebook share this name."""
    return dns_label(f"nb-{ref.id}", max_len=40)


def app_name(ref: WorkloadRef) -> str:
    """Deployment, Service, Ingress and autoscaler of an app share this name."""
    return dns_label(f"app-{ref.id}", max_len=40)


def selector_labels(ref: WorkloadRef) -> dict[str, str]:
    """The labels that find every object of one workload run."""
    labels = {
        MANAGED_BY: MANAGER,
        PROJECT: label_value(ref.project),
        KIND: ref.kind.value,
        ID: label_value(ref.id),
    }
    if kinds.spec(ref.kind).numbered_runs:
        labels[RUN] = str(ref.run)
    return labels


def workload_labels(ref: WorkloadRef, *, component: str) -> dict[str, str]:
    """Selector labels plus the component and the install. The install stays out of
    `selector_labels`: a Deployment's or StatefulSet's selector cannot change, and objects
    made before install ids must still be found by their run."""
    return {**selector_labels(ref), COMPONENT: component, **install_labels(ref.install)}


def project_labels(slug: str, install: str = "") -> dict[str, str]:
    """Labels of a project's own objects (namespace, quota, policies, Secret)."""
    return {MANAGED_BY: MANAGER, PROJECT: label_value(slug), KIND: "project"} | install_labels(
        install
    )


def install_labels(install: str) -> dict[str, str]:
    """`ajuste.io/install: <id>`, or nothing where no install id is known (tests, local)."""
    return {INSTALL: install} if install else {}


def install_of(obj: Mapping[str, Any]) -> str:
    """The install an object says it belongs to; "" when it carries no such label."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(INSTALL) or "")


def belongs(obj: Mapping[str, Any], install: str) -> bool:
    """Whether `install` may treat `obj` as its own: it carries that install's label, or none
    (made before install ids: adopted by the install that has its row). Anything goes where
    `install` is empty (a backend without an identity: tests, the local backend)."""
    return not install or install_of(obj) in ("", install)


def selector(labels: dict[str, str]) -> str:
    """A label selector string for the API (`a=b,c=d`)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
