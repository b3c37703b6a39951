"""The only module that talks to the Kubernetes API (through the official client).

Objects go in and come out as plain dicts, exactly as `deploy.manifests` builds them, so the
rest of the backend is pure functions over dicts. Transient failures (5xx, 429, connection
errors) are retried a few times here and then raised as `TransientError`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from deploy.types import TransientError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# How long a watch may stay silent beyond its own timeoutSeconds before it counts as dead.
WATCH_GRACE_S = 30.0

T = TypeVar("T")
Query = list[tuple[str, str]]
MERGE_PATCH = "application/merge-patch+json"
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_DELAYS_S = (0.2, 0.5, 1.0)


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API."""

    api_version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        path = f"{root}/{self.plural}"
        if name is not None:
            path += f"/{name}"
        if sub is not None:
            path += f"/{sub}"
        return path


KINDS: dict[str, Kind] = {
    "Namespace": Kind("v1", "namespaces", namespaced=False),
    "Node": Kind("v1", "nodes", namespaced=False),
    "Secret": Kind("v1", "secrets"),
    "Pod": Kind("v1", "pods"),
    "Event": Kind("v1", "events"),
    "Service": Kind("v1", "services"),
    "PersistentVolumeClaim": Kind("v1", "persistentvolumeclaims"),
    "ResourceQuota": Kind("v1", "resourcequotas"),
    "LimitRange": Kind("v1", "limitranges"),
    "Job": Kind("batch/v1", "jobs"),
    "StatefulSet": Kind("apps/v1", "statefulsets"),
    "Deployment": Kind("apps/v1", "deployments"),
    "ReplicaSet": Kind("apps/v1", "replicasets"),
    "HorizontalPodAutoscaler": Kind("autoscaling/v2", "horizontalpodautoscalers"),
    "ScaledObject": Kind("keda.sh/v1alpha1", "scaledobjects"),
    "Ingress": Kind("networking.k8s.io/v1", "ingresses"),
    "NetworkPolicy": Kind("networking.k8s.io/v1", "networkpolicies"),
    "RoleBinding": Kind("rbac.authorization.k8s.io/v1", "rolebindings"),
    "Lease": Kind("coordination.k8s.io/v1", "leases"),
    # JobSet (jobs of several nodes).
    "JobSet": Kind("jobset.x-k8s.io/v1alpha2", "jobsets"),
    # Kueue (QUEUE_ENGINE=kueue): what Ajuste configures, and the Workloads it reads.
    "ResourceFlavor": Kind("kueue.x-k8s.io/v1beta2", "resourceflavors", namespaced=False),
    "ClusterQueue": Kind("kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False),
    "WorkloadPriorityClass": Kind(
        "kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", namespaced=False
    ),
    "LocalQueue": Kind("kueue.x-k8s.io/v1beta2", "localqueues"),
    "Workload": Kind("kueue.x-k8s.io/v1beta2", "workloads"),
}


def is_status(exc: BaseException, *statuses: int) -> bool:
    """Whether `exc` is an API error with one of these HTTP statuses."""
    return isinstance(exc, ApiException) and exc.status in statuses


class KubeApi:
    """Typed-dict CRUD, list, watch and logs over one `ApiClient`."""

    def __init__(self, client: ApiClient, *, request_timeout_s: float = 30.0) -> None:
        self.client = client
        self.timeout = (5.0, request_timeout_s)

    def create(self, body: Obj) -> Obj:
        kind = KINDS[body["kind"]]
        path = kind.path(body["metadata"].get("namespace"))
        return self._json("POST", path, body=body)

    def read(self, kind: str, namespace: str | None, name: str) -> Obj:
        return self._json("GET", KINDS[kind].path(namespace, name))

    def patch(self, kind: str, namespace: str | None, name: str, patch: Obj) -> Obj:
        """A JSON merge patch: maps merge, lists are replaced whole."""
        path = KINDS[kind].path(namespace, name)
        return self._json("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def delete(
        self, kind: str, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        """Delete (in the background); with `uid`, only that object (409 if the name now
        holds another)."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        self._json("DELETE", KINDS[kind].path(namespace, name), body=body)

    def get(self, path: str, **query: str) -> Obj:
        """GET of a path no kind names: an aggregated API's subresource (Kueue's visibility
        API, `.../localqueues/<name>/pendingworkloads`)."""
        return self._json("GET", path, query=_query(**query))

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion (to watch from)."""
        query = _query(labelSelector=label_selector, fieldSelector=field_selector)
        result = self._json("GET", KINDS[kind].path(namespace), query=query)
        return list(result.get("items") or []), str(result["metadata"].get("resourceVersion", ""))

    def watch(
        self,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str,
        resource_version: str,
        timeout_s: int,
    ) -> Iterator[Obj]:
        """Raw watch events until the server ends the stream (after `timeout_s`).

        An ERROR event is raised as `ApiException` with its code (410: relist)."""
        query = _query(
            watch="true",
            labelSelector=label_selector,
            resourceVersion=resource_version,
            timeoutSeconds=str(timeout_s),
            allowWatchBookmarks="true",
        )
        # The server ends the stream after timeout_s; silence well beyond that is a dead
        # connection (a vanished load balancer, a half-open socket), not a quiet cluster.
        response = self._send(
            "GET",
            KINDS[kind].path(namespace),
            query=query,
            stream=True,
            read_timeout_s=timeout_s + WATCH_GRACE_S,
        )
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiException(status=status.get("code", 500), reason=status.get("message"))
                yield event
        finally:
            response.release_conn()

    def pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        since_time: str | None,
        limit_bytes: int,
        deadline_s: float | None = None,
    ) -> str:
        """The container's log with RFC 3339 timestamps, from `since_time` (seconds) on.
        `deadline_s`: the read's own limit, tried once (the log collector reads again later)."""
        query = _query(
            container=container,
            timestamps="true",
            sinceTime=since_time,
            limitBytes=str(limit_bytes),
        )
        path = KINDS["Pod"].path(namespace, name, "log")
        if deadline_s is None:
            data = self._send("GET", path, query=query, accept="text/plain").data
        else:
            response = self._once(path, query, read_timeout_s=deadline_s)
            try:
                data = response.read()
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise TransientError(f"the log read timed out: {_describe(exc)}") from exc
            finally:
                response.release_conn()
        return str(data.decode("utf-8", errors="replace"))

    def follow_pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        since_time: str | None,
        idle_s: float,
    ) -> Iterator[bytes]:
        """The container's log streamed (`follow=true`, as `kubectl logs -f`), as the kubelet
        sends it, until the container ends; a silence longer than `idle_s` raises (the caller
        resumes from its cursor)."""
        query = _query(container=container, timestamps="true", sinceTime=since_time, follow="true")
        path = KINDS["Pod"].path(namespace, name, "log")
        response = self._once(path, query, read_timeout_s=idle_s)
        try:
            yield from response.stream(64 * 1024, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(f"the log stream broke: {_describe(exc)}") from exc
        finally:
            response.release_conn()

    def _once(self, path: str, query: Query, *, read_timeout_s: float) -> Any:
        """A streamed GET of text, tried once, with its own read time-out."""
        request = self.client.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query,
            header_params={"Accept": "text/plain"},
            auth_settings=["BearerToken"],
        )
        try:
            return self._call(request, (5.0, read_timeout_s), True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(f"the Kubernetes API did not answer: {_describe(exc)}") from exc

    def _json(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        data: Obj = json.loads(response.data or b"{}")
        return data

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        stream: bool = False,
        read_timeout_s: float | None = None,
    ) -> Any:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        timeout = (5.0, read_timeout_s) if stream else self.timeout
        return with_retries(lambda: self._call(request, timeout, stream))

    def _call(self, request: Any, timeout: Any, stream: bool) -> Any:
        method, url, headers, body, post = request
        response = self.client.call_api(method, url, headers, body, post, _request_timeout=timeout)
        if not stream or not 200 <= response.status <= 299:
            response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response if stream else response


def with_retries(call: Callable[[], T]) -> T:
    """Retry transient API failures briefly; then give up with `TransientError`."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return call()
        except ApiException as exc:
            if exc.status not in RETRIED_STATUSES:
                raise
            error: Exception = exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            error = exc
        if delay is None:
            break
        log.info("kubernetes API call failed (%s); retrying in %.1fs", error, delay)
        time.sleep(delay)
    raise TransientError(f"the Kubernetes API did not answer: {_describe(error)}") from error


def _describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason or ''}".strip()
    return str(error) or type(error).__name__


def _query(**params: str | None) -> Query:
    return [(key, value) for key, value in params.items() if value is not None]
