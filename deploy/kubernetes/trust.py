"""Which listed or watched objects are really Ajuste's.

Labels and annotations prove nothing: whoever may create a pod (or a Job) in any namespace can
label it `managed-by=ajuste` and annotate it with another tenant's job id. So an object counts
as part of a run only when
- its namespace is one of Ajuste's project namespaces (made by `ensure_project`, labelled
  `managed-by=ajuste`, `kind=project` and with the project's slug: namespace labels are
  cluster-scoped writes, out of a tenant's reach) and the project the object names is that
  namespace's project;
- it is the run's Job by the run's deterministic name (unique in the namespace, and only the
  panel may create Jobs there), or a pod *controlled* by that Job: its controller
  ownerReference, and the `controller-uid` labels the Job controller sets, carry that Job's
  UID. A notebook's pods are controlled by its StatefulSet in the same way.
"""

from __future__ import annotations

import re

from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.types import WorkloadRef

NAMESPACE_LABELS = {names.MANAGED_BY: names.MANAGER, names.KIND: "project"}
PROJECT_NAMESPACES = names.selector(NAMESPACE_LABELS)
CONTROLLER_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")


class ProjectNamespaces:
    """Ajuste's project namespaces and the project each holds: listed at every (re)list, and
    looked up one by one for a namespace made since (a watch outlives its list)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.projects: dict[str, str] = {}
        self.foreign: set[str] = set()

    def refresh(self) -> None:
        items, _ = self.api.list("Namespace", None, label_selector=PROJECT_NAMESPACES)
        self.projects = {item["metadata"]["name"]: _project_of(item) for item in items}
        self.foreign = set()

    def holds(self, ref: WorkloadRef, *, look_up: bool = True) -> bool:
        """Whether `ref` names a run in its own project's namespace; `look_up` asks the API
        about a namespace the last list did not show (one GET, remembered till the next)."""
        known = ref.namespace in self.projects or ref.namespace in self.foreign
        if look_up and not known:
            self._look_up(ref.namespace)
        found = self.projects.get(ref.namespace)
        return found is not None and found == names.label_value(ref.project)

    def _look_up(self, namespace: str) -> None:
        try:
            found = self.api.read("Namespace", None, namespace)
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
            self.foreign.add(namespace)
            return
        labels = (found.get("metadata") or {}).get("labels") or {}
        if all(labels.get(k) == v for k, v in NAMESPACE_LABELS.items()):
            self.projects[namespace] = _project_of(found)
        else:
            self.foreign.add(namespace)


def controlled_by(obj: Obj, owner: Obj | None) -> bool:
    """Whether `owner` (a Job, a StatefulSet) is the controller of `obj` (a pod)."""
    uid = ((owner or {}).get("metadata") or {}).get("uid")
    if not uid:
        return False
    meta = obj.get("metadata") or {}
    controllers = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if len(controllers) != 1 or controllers[0].get("uid") != uid:
        return False
    labels = meta.get("labels") or {}
    return all(labels.get(key, uid) == uid for key in CONTROLLER_UID_LABELS)


def is_main_job(ref: WorkloadRef, job: Obj) -> bool:
    """The run's own Job: the name Ajuste gives it."""
    return _name(job) == names.job_name(ref)


def is_push_job(ref: WorkloadRef, job: Obj) -> bool:
    """One of the run's finalize Jobs: `<job name>-push-<attempt>`."""
    pattern = re.escape(names.push_job_name(ref, 0)).removesuffix("0") + r"[1-9][0-9]*"
    return re.fullmatch(pattern, _name(job)) is not None


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _project_of(namespace: Obj) -> str:
    return str(((namespace.get("metadata") or {}).get("labels") or {}).get(names.PROJECT, ""))
