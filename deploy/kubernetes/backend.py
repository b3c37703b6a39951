"""`KubernetesBackend`: the `ComputeBackend` that runs workloads on a cluster."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TypeVar

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from deploy import manifests, names
from deploy.kubernetes import jobsets, orphans
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.apply import apply, delete, delete_found, delete_labelled, label_install
from deploy.kubernetes.capacity import read_capacity
from deploy.kubernetes.client import make_api_client
from deploy.kubernetes.driver import driver
from deploy.kubernetes.jobsets import observe_run
from deploy.kubernetes.listing import app_state, job_objects, notebook_state
from deploy.kubernetes.observe import JobObjects
from deploy.kubernetes.runlogs import RunLogs
from deploy.kubernetes.stopping import STOP_ATTEMPTS, STOPPABLE, stop_patch
from deploy.kubernetes.sweep import observe_everything, observe_namespaces, project_namespaces
from deploy.kubernetes.watcher import watch_workloads
from deploy.types import (
    AppRequest,
    ClusterCapacity,
    JobRequest,
    LogChunk,
    NotebookRequest,
    ObservedWorkload,
    Phase,
    ProjectRequest,
    TransientError,
    WorkloadRef,
)

log = logging.getLogger(__name__)

Request = TypeVar("Request", JobRequest, NotebookRequest, AppRequest, ProjectRequest)


class KubernetesBackend:
    """Jobs as batch/v1 Jobs, notebooks as StatefulSets, apps as Deployments (with an HPA or a
    KEDA ScaledObject when they autoscale), projects as namespaces.

    `service_account`/`service_account_namespace` name the panel's own identity, bound to the
    `ajuste-project` ClusterRole inside each project namespace by `ensure_project`.

    `install_id` is this install's identity: every request and ref is given it, so every
    object made carries `ajuste.io/install: <id>`, and no object labelled with another id is
    read, adopted, patched or deleted. `namespaced` sweeps one project namespace at a time
    (clusters that grant no cluster-wide reads of pods and workloads). `images` moves images
    the way an overlay's kustomize `images:` moved the panel's: a request's image named as a
    key runs as its value (a mirror of the serving and editor images).
    """

    name = "kubernetes"

    def __init__(
        self,
        *,
        api_client: ApiClient | None = None,
        service_account: str = "ajuste-controller",
        service_account_namespace: str = "ajuste",
        watch_timeout_s: int = 30,
        request_timeout_s: float = 30.0,
        install_id: str = "",
        namespaced: bool = False,
        images: Mapping[str, str] | None = None,
        namespaced_poll_s: float = 10.0,
        log_read_deadline_s: float = 10.0,
        log_follow_idle_s: float = 60.0,
    ) -> None:
        self.api = KubeApi(api_client or make_api_client(), request_timeout_s=request_timeout_s)
        self.service_account = service_account
        self.service_account_namespace = service_account_namespace
        self.watch_timeout_s = watch_timeout_s
        self.install_id = names.label_value(install_id) if install_id else ""
        self.namespaced, self.namespaced_poll_s = namespaced, namespaced_poll_s
        self.images = dict(images or {})
        self.logs = RunLogs(
            self.api, read_deadline_s=log_read_deadline_s, follow_idle_s=log_follow_idle_s
        )

    def capacity(self) -> None:
        """None: the scheduler (and Kueue, where installed) queues what the nodes cannot run."""
        return None

    def cluster_capacity(self) -> ClusterCapacity:
        if self.namespaced:
            return read_capacity(self.api, namespaces=project_namespaces(self.api))
        return read_capacity(self.api)

    def _ref(self, ref: WorkloadRef) -> WorkloadRef:
        """`ref` as this install's (as it is, where this backend has no install id)."""
        if not self.install_id or ref.install == self.install_id:
            return ref
        return replace(ref, install=self.install_id)

    def _own(self, request: Request) -> Request:
        """`request` as this install's, its image moved where `images` says."""
        if self.install_id:
            request = replace(request, install=self.install_id)
        image = getattr(request, "image", None)
        if image in self.images:
            request = replace(request, image=self.images[image])  # type: ignore[call-arg]
        return request

    def ensure_project(self, *, project: ProjectRequest) -> None:
        project = self._own(project)
        for manifest in manifests.make_project_objects(
            project=project,
            service_account=self.service_account,
            service_account_namespace=self.service_account_namespace,
        ):
            apply(self.api, manifest)

    def apply_job(self, *, job: JobRequest) -> ObservedWorkload:
        job = self._own(job)
        objects = job_objects(self.api, job.ref)
        if job.nodes > 1 and objects.jobset is None:
            # Several nodes: the JobSet makes the child Job, its pods and headless Service.
            created = apply(self.api, manifests.make_jobset(job=job))
            objects = JobObjects(job=None, jobset=created)
        elif objects.jobset is not None:
            pass  # made already: observed below
        elif objects.job is None:
            claim = manifests.make_workspace_claim(job=job)
            if claim is not None:
                apply(self.api, claim)  # first: the pod must find its claim
            created = apply(self.api, manifests.make_job(job=job))
            objects = JobObjects(job=created)
        elif self.install_id and not names.install_of(objects.job):
            label_install(self.api, "Job", objects.job, self.install_id)  # from before install ids
        observed = observe_run(job.ref, objects)
        if observed.needs_apply:
            apply(self.api, manifests.make_push_job(job=job, attempt=1))
            observed = self.observe_job(ref=job.ref)
        return observed

    def stop_job(self, *, job: JobRequest) -> None:
        """A running Job gets a deadline of one second: the Job controller ends the pod
        gracefully now. A Job still suspended by Kueue gets parallelism 0 as well, so no pod
        can start when Kueue admits it later. The annotation tells a stop from a timeout."""
        job = self._own(job)
        name = names.job_name(job.ref)
        for _ in range(STOP_ATTEMPTS):
            objects = job_objects(self.api, job.ref)
            target = objects.jobset or objects.job
            if target is None or observe_run(job.ref, objects).phase not in STOPPABLE:
                return
            # A JobSet is suspended (a deadline on its child Job would restart the group).
            kind, patch = (
                (jobsets.KIND, jobsets.stop_patch(target))
                if objects.jobset is not None
                else ("Job", stop_patch(target))
            )
            try:
                self.api.patch(kind, job.namespace, name, patch)
                if objects.jobset is not None:
                    jobsets.deactivate_workload(self.api, objects.jobset)
                return
            except ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
                # Changed since it was read (Kueue admitted it, say): decide again.
        raise TransientError(f"the Job {job.namespace}/{name} kept changing while being stopped")

    def retry_push(self, *, job: JobRequest) -> None:
        job = self._own(job)
        observed = self.observe_job(ref=job.ref)
        if observed.phase is Phase.SYNC_FAILED:
            attempt = observed.push_attempt + 1
            apply(self.api, manifests.make_push_job(job=job, attempt=attempt))

    def delete_job(self, *, ref: WorkloadRef) -> None:
        selector = names.selector(names.selector_labels(ref))
        for found in jobsets.list_jobsets(self.api, ref.namespace, selector):
            if names.belongs(found, self.install_id):
                delete_found(self.api, found, jobsets.KIND)  # its child Jobs and Service follow
        for kind in ("Job", "Pod", "PersistentVolumeClaim"):
            delete_labelled(self.api, kind, ref.namespace, selector, install=self.install_id)

    def release_workspace(self, *, ref: WorkloadRef) -> None:
        """The run's workspace claim goes once the run ended cleanly (a failed push keeps it
        for `retry_push`); 404 means it is gone already, or the run never had one. The run's
        ended pods that mount it go first: the claim's protection holds it, Terminating and
        counted by the namespace's storage quota, while any pod on a node mounts it, even one
        that has ended."""
        claim = names.workspace_claim_name(ref)
        ref = self._ref(ref)
        pods, _ = self.api.list(
            "Pod", ref.namespace, label_selector=names.selector(names.selector_labels(ref))
        )
        for pod in pods:
            if _ended_mounting(pod, claim):
                delete(
                    self.api, "Pod", ref.namespace, pod["metadata"]["name"], install=self.install_id
                )
        delete(self.api, "PersistentVolumeClaim", ref.namespace, claim, install=self.install_id)

    def observe_job(self, *, ref: WorkloadRef) -> ObservedWorkload:
        ref = self._ref(ref)
        return observe_run(ref, job_objects(self.api, ref))

    def read_logs(
        self, *, ref: WorkloadRef, cursor: str | None, limit: int = 1000, fresh: bool = False
    ) -> LogChunk:
        return self.logs.read(self._ref(ref), cursor, limit, fresh=fresh)

    def follow_logs(
        self, *, ref: WorkloadRef, cursor: str | None, keep: Callable[[], bool]
    ) -> Iterator[LogChunk]:
        """The log as it is printed (`follow=true`), from `cursor`, while `keep()`."""
        return self.logs.follow(self._ref(ref), cursor, keep=keep)

    def apply_notebook(self, *, notebook: NotebookRequest) -> ObservedWorkload:
        notebook = self._own(notebook)
        # The token first: a pod the StatefulSet starts reads it as it is.
        apply(self.api, manifests.make_notebook_secret(notebook=notebook))
        apply(self.api, manifests.make_notebook_service(notebook=notebook))
        # The user-content gateway serves it: an earlier version's Ingress goes (404: none).
        delete(
            self.api,
            "Ingress",
            notebook.namespace,
            names.notebook_name(notebook.ref),
            install=self.install_id,
        )
        apply(self.api, manifests.make_notebook_statefulset(notebook=notebook))
        return self.observe_notebook(ref=notebook.ref)

    def delete_notebook(self, *, ref: WorkloadRef) -> None:
        named = ("Ingress", "Service", "StatefulSet", "Secret")
        self._delete_server(ref, names.notebook_name(ref), named, ("Pod", "PersistentVolumeClaim"))

    def observe_notebook(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return notebook_state(self.api, self._ref(ref))

    def apply_app(self, *, app: AppRequest) -> ObservedWorkload:
        """The Service first (the URL answers as soon as a replica serves), then the
        Deployment, then what scales it. An autoscaler that no longer applies (a fixed count,
        a stop, KEDA switched) goes before the Deployment takes its count, so it cannot scale
        the app back meanwhile. A changed template is a rolling update of the same
        Deployment; while an autoscaler owns the count, applying leaves it alone."""
        app = self._own(app)
        name = names.app_name(app.ref)
        current = self._read("Deployment", app.namespace, name)
        if current is not None and not names.belongs(current, self.install_id):
            current = None  # another install's: apply refuses it below (ConflictError)
        autoscaler = manifests.make_app_autoscaler(app=app)
        for kind in ("HorizontalPodAutoscaler", "ScaledObject"):
            if autoscaler is None or autoscaler["kind"] != kind:
                # 404: none, or no KEDA
                delete(self.api, kind, app.namespace, name, install=self.install_id)
        apply(self.api, manifests.make_app_service(app=app))
        delete(self.api, "Ingress", app.namespace, name, install=self.install_id)  # see above
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        started = current is not None and annotations.get(names.STOPPED) != "true"
        deployment = manifests.make_app_deployment(app=app, keep_replicas=started)
        apply(self.api, deployment)
        if autoscaler is not None:
            apply(self.api, autoscaler)
        return self.observe_app(ref=app.ref)

    def delete_app(self, *, ref: WorkloadRef) -> None:
        named = ("HorizontalPodAutoscaler", "ScaledObject", "Ingress", "Service", "Deployment")
        self._delete_server(ref, names.app_name(ref), named, ("ReplicaSet", "Pod"))

    def observe_app(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return app_state(self.api, self._ref(ref))

    def stop_orphan(self, *, ref: WorkloadRef) -> bool:
        return orphans.stop_orphan(self.api, ref, install=self.install_id)

    def delete_orphan(self, *, ref: WorkloadRef) -> None:
        orphans.delete_orphan(self.api, ref, install=self.install_id)

    def _delete_server(
        self, ref: WorkloadRef, name: str, named: tuple[str, ...], labelled: tuple[str, ...]
    ) -> None:
        """A notebook's or an app's objects: those under its one name, in order, then those
        found by its labels."""
        for kind in named:
            delete(self.api, kind, ref.namespace, name, install=self.install_id)
        selector = names.selector(names.selector_labels(ref))
        for kind in labelled:
            delete_labelled(self.api, kind, ref.namespace, selector, install=self.install_id)

    def _read(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return self.api.read(kind, namespace, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def observe_all(self, *, namespace: str | None = None) -> list[ObservedWorkload]:
        """Every run of this install (and those made before install ids); one project
        namespace at a time when `namespaced` (unless one is named)."""
        if self.namespaced and namespace is None:
            return observe_namespaces(self.api, install=self.install_id)[0]
        observations, _ = observe_everything(self.api, namespace, install=self.install_id)
        return observations

    def watch(
        self, *, stop: threading.Event, namespace: str | None = None, resync_s: float = 300.0
    ) -> Iterator[ObservedWorkload]:
        """Observations as pods change. In the namespaced mode, without a `namespace`, every
        project namespace is listed again every `namespaced_poll_s` instead (a watch needs
        one namespace: a caller that wants events watches each of `project_namespaces`)."""
        if self.namespaced and namespace is None:
            return self._poll_namespaces(stop)
        return watch_workloads(
            self.api,
            stop=stop,
            namespace=namespace,
            resync_s=resync_s,
            watch_timeout_s=self.watch_timeout_s,
            observe=self._observe_after_event,
            install=self.install_id,
        )

    def _poll_namespaces(self, stop: threading.Event) -> Iterator[ObservedWorkload]:
        while not stop.is_set():
            try:
                yield from self.observe_all()
            except TransientError as exc:
                log.warning("listing the project namespaces failed: %s", exc)
            stop.wait(self.namespaced_poll_s)

    def _observe_after_event(self, ref: WorkloadRef, deleted_pod: Obj | None) -> ObservedWorkload:
        """Observe one run after a watch event, as its kind's driver does (a job pod that
        just went away still tells how its run ended)."""
        return driver(ref.kind).after_event(self.api, self._ref(ref), deleted_pod)


def _ended_mounting(pod: Obj, claim: str) -> bool:
    """Whether `pod` has ended and mounts the claim `claim`."""
    if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
        return False
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes)
