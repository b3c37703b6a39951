"""The Kubernetes emulator refuses what a real API server refuses, with the same status, and
changes nothing when it does; it honours `propagationPolicy` and `backoffLimit`. Every other
k8s test trusts it, so each refusal here is one those tests can no longer slip past."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.api import KubeApi
from deploy.kubernetes.apply import apply, delete
from deploy.manifests import make_job, make_notebook_service, make_workspace_claim
from deploy.types import NotebookRequest
from tests.deploy.conftest import make_job_request
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]

NS = "ajuste-vision"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
Obj = dict[str, Any]


def job_manifest(**changes: Any) -> Obj:
    """The panel's own Job for a run without volumes."""
    return make_job(job=make_job_request(volumes=(), **changes))


def refusal(call: Callable[[], object]) -> tuple[int, Obj]:
    """The status code and Status body of an API call that must fail."""
    with pytest.raises(ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)


def causes(status: Obj) -> dict[str, str]:
    return {c["field"]: c["message"] for c in status["details"]["causes"]}


def send(cluster: EmulatedCluster, method: str, path: str, body: bytes, **headers: str) -> Any:
    """A raw request, for bodies the official client would never send."""
    headers.setdefault("Content-Type", "application/json")
    headers.update(cluster.headers)
    return urllib3.request(method, cluster.url + path, body=body, headers=headers)


@pytest.fixture
def api(k8s_backend: KubernetesBackend) -> KubeApi:
    return k8s_backend.api


# -- namespaces --------------------------------------------------------------------------------


def test_nothing_is_created_in_a_namespace_that_does_not_exist(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    manifest = job_manifest(namespace="ajuste-nowhere")
    code, status = refusal(lambda: api.create(manifest))
    assert (code, status["reason"], status["message"]) == (
        404,
        "NotFound",
        'namespaces "ajuste-nowhere" not found',
    )
    assert k8s_cluster.list("jobs") == []
    # Reads answer as a real server does: the object is not found, the list is empty.
    assert refusal(lambda: api.read("Job", "ajuste-nowhere", "job-42-r1"))[0] == 404
    assert api.list("Job", "ajuste-nowhere")[0] == []


def test_a_terminating_namespace_takes_nothing_new_and_empties(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    apply(api, job_manifest())
    api.delete("Namespace", None, NS)
    terminating = k8s_cluster.get("namespaces", None, NS)
    assert terminating is not None and terminating["status"]["phase"] == "Terminating"
    code, status = refusal(lambda: api.create(job_manifest(id="43")))
    assert (code, status["reason"]) == (403, "Forbidden")
    assert "because it is being terminated" in status["message"]
    k8s_cluster.reconcile()  # the namespace controller and the garbage collector
    assert k8s_cluster.list("namespaces") == k8s_cluster.list("jobs") == []
    assert k8s_cluster.list("pods") == []


# -- names and labels --------------------------------------------------------------------------


def renamed(name: str) -> Obj:
    manifest = job_manifest()
    manifest["metadata"]["name"] = name
    return manifest


@pytest.mark.parametrize(
    ("manifest", "field", "says"),
    [
        (renamed("Job_42"), "metadata.name", "a lowercase RFC 1123 subdomain must consist"),
        (renamed("job-" + "x" * 60), "metadata.name", "must be no more than 63 characters"),
        (renamed(""), "metadata.name", "name or generateName is required"),
    ],
    ids=["uppercase-and-underscore", "job-name-too-long-for-its-pod-label", "no-name"],
)
def test_a_bad_name_is_a_422_with_its_cause(
    k8s_cluster: EmulatedCluster, api: KubeApi, manifest: Obj, field: str, says: str
) -> None:
    code, status = refusal(lambda: api.create(manifest))
    assert (code, status["reason"]) == (422, "Invalid")
    assert says in causes(status)[field]
    assert status["message"].startswith(f'Job.batch "{manifest["metadata"]["name"]}" is invalid: ')
    assert k8s_cluster.list("jobs") == []


def test_a_nameless_create_is_refused_once_not_retried_as_transient(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    code, _ = refusal(lambda: api.create(renamed("")))
    assert code == 422
    assert [r.method.value for r in k8s_cluster.requests()] == ["POST"]


def test_generate_name_makes_a_name(api: KubeApi) -> None:
    manifest = renamed("")
    manifest["metadata"]["generateName"] = "job-42-"
    created = api.create(manifest)
    assert created["metadata"]["name"].startswith("job-42-")
    assert len(created["metadata"]["name"]) == len("job-42-") + 5


def test_services_and_namespaces_take_labels_not_subdomains(
    k8s_cluster: EmulatedCluster, api: KubeApi, notebook_request: NotebookRequest
) -> None:
    service = make_notebook_service(notebook=notebook_request)
    service["metadata"]["name"] = "7-notebook"  # a DNS-1035 label starts with a letter
    code, status = refusal(lambda: api.create(service))
    assert code == 422 and "a DNS-1035 label must consist" in causes(status)["metadata.name"]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ajuste.vision"}}
    code, status = refusal(lambda: api.create(namespace))
    assert code == 422 and "RFC 1123 label" in causes(status)["metadata.name"]
    assert k8s_cluster.list("services") == [] and len(k8s_cluster.list("namespaces")) == 1


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ({"team": "nlp research"}, "a valid label must be an empty string or consist of"),
        ({"team": "x" * 64}, "must be no more than 63 characters"),
        ({"Bad_Prefix/team": "nlp"}, "prefix part a lowercase RFC 1123 subdomain"),
        ({"ajuste.io/" + "k" * 64: "nlp"}, "name part must be no more than 63 characters"),
        ({"-team": "nlp"}, "name part must consist of alphanumeric characters"),
    ],
    ids=["space-in-value", "value-too-long", "bad-prefix", "key-too-long", "key-starts-with-dash"],
)
def test_bad_labels_are_refused_on_the_object_and_its_template(
    k8s_cluster: EmulatedCluster, api: KubeApi, labels: dict[str, str], says: str
) -> None:
    manifest = job_manifest()
    manifest["metadata"]["labels"].update(labels)
    code, status = refusal(lambda: api.create(manifest))
    assert code == 422 and says in causes(status)["metadata.labels"]
    template = job_manifest()
    template["spec"]["template"]["metadata"]["labels"].update(labels)
    code, status = refusal(lambda: api.create(template))
    assert code == 422 and says in causes(status)["spec.template.metadata.labels"]
    assert k8s_cluster.list("jobs") == []


# -- decoding and the schema -------------------------------------------------------------------


def test_wrong_types_and_unknown_fields_are_400s(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    typed = job_manifest()
    typed["spec"]["backoffLimit"] = "none"
    code, status = refusal(lambda: api.create(typed))
    assert (code, status["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal str into Go struct field spec.backoffLimit" in status["message"]
    unknown = job_manifest()
    unknown["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    code, status = refusal(lambda: api.create(unknown))
    assert (code, status["message"]) == (
        400,
        'strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolice"',
    )
    assert k8s_cluster.list("jobs") == []


def test_a_missing_required_field_is_a_422(api: KubeApi) -> None:
    manifest = job_manifest()
    del manifest["spec"]["template"]["spec"]["containers"][0]["name"]
    code, status = refusal(lambda: api.create(manifest))
    assert code == 422
    assert causes(status)["spec.template.spec.containers[0].name"] == "Required value"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"apiVersion": "batch/v1", "kind": "Job", ', "json parse error"),
        (b'{"metadata": {"name": "j"}}', "Object 'Kind' is missing"),
        (b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}}', "API version"),
        (b'{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "j"}}', "kind"),
        (
            b'{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", '
            b'"namespace": "ajuste-nlp"}}',
            "does not match the namespace",
        ),
    ],
    ids=["malformed", "no-kind", "other-api-version", "other-kind", "other-namespace"],
)
def test_undecodable_bodies_are_400s(k8s_cluster: EmulatedCluster, body: bytes, says: str) -> None:
    response = send(k8s_cluster, "POST", JOBS, body)
    assert response.status == 400
    assert response.json()["reason"] == "BadRequest" and says in response.json()["message"]
    assert k8s_cluster.list("jobs") == []


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (
            lambda pod: pod["containers"][0]["volumeMounts"].append(
                {"name": "scratch", "mountPath": "/scratch"}
            ),
            "spec.template.spec.containers[0].volumeMounts[2].name",
            'Not found: "scratch"',
        ),
        (
            lambda pod: pod["containers"].append({"name": "main", "image": "busybox"}),
            "spec.template.spec.containers[1].name",
            'Duplicate value: "main"',
        ),
        (
            lambda pod: pod["containers"][0]["env"].append({"name": "1EPOCH", "value": "1"}),
            "spec.template.spec.containers[0].env[1].name",
            "a valid environment variable name",
        ),
        (
            lambda pod: pod.pop("restartPolicy"),  # a pod's default, Always, is no Job's
            "spec.template.spec.restartPolicy",
            'supported values: "OnFailure", "Never"',
        ),
        (
            lambda pod: pod["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
            "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "Limit must be set for non overcommitable resources",
        ),
        (
            lambda pod: pod["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "1"}),
            "spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]",
            "must be equal to nvidia.com/gpu limit of 1",
        ),
        (
            lambda pod: pod["containers"][0]["resources"]["requests"].update({"cpu": "99"}),
            "spec.template.spec.containers[0].resources.requests[cpu]",
            "must be less than or equal to cpu limit of 52",
        ),
    ],
    ids=[
        "mount-of-no-volume",
        "duplicate-container",
        "env-name",
        "job-restart-policy",
        "gpu-without-limit",
        "gpu-request-not-limit",
        "cpu-over-limit",
    ],
)
def test_pod_specs_are_validated(
    k8s_cluster: EmulatedCluster,
    api: KubeApi,
    change: Callable[[Obj], object],
    field: str,
    says: str,
) -> None:
    manifest = job_manifest()
    change(manifest["spec"]["template"]["spec"])
    code, status = refusal(lambda: api.create(manifest))
    assert code == 422 and says in causes(status)[field]
    assert k8s_cluster.list("jobs") == []


def test_a_bad_quantity_is_a_400(api: KubeApi) -> None:
    manifest = job_manifest()
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "lots"
    code, status = refusal(lambda: api.create(manifest))
    assert code == 400 and "quantities must match the regular expression" in status["message"]


# -- what the server sets ----------------------------------------------------------------------


def test_a_job_gets_its_selector_pod_labels_and_defaults(api: KubeApi) -> None:
    created = api.create(job_manifest())
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {
        "matchLabels": {"batch.kubernetes.io/controller-uid": uid}
    }
    labels = created["spec"]["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "job-42-r1"
    assert labels["controller-uid"] == uid
    spec = created["spec"]
    assert (spec["backoffLimit"], spec["completions"], spec["parallelism"]) == (0, 1, 1)
    selected = job_manifest(id="43")
    selected["spec"]["selector"] = {"matchLabels": {"app": "x"}}
    code, status = refusal(lambda: api.create(selected))
    assert code == 422 and "`selector` will be auto-generated" in causes(status)["spec.selector"]


def test_status_is_the_servers_not_the_clients(api: KubeApi) -> None:
    manifest = job_manifest()
    manifest["status"] = {"succeeded": 1}
    assert "succeeded" not in api.create(manifest).get("status", {})
    patched = api.patch("Job", NS, "job-42-r1", {"status": {"succeeded": 1}})
    assert "succeeded" not in patched["status"]


# -- updates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x:2"}]}}}},
            "spec.template",
        ),
        ({"spec": {"completions": 2}}, "spec.completions"),
        ({"spec": {"selector": {"matchLabels": {"app": "x"}}}}, "spec.selector"),
        ({"metadata": {"uid": "0d9b1c2e-0000-0000-0000-000000000000"}}, "metadata.uid"),
    ],
    ids=["template", "completions", "selector", "uid"],
)
def test_immutable_job_fields_are_refused(
    k8s_cluster: EmulatedCluster, api: KubeApi, patch: Obj, field: str
) -> None:
    before = api.create(job_manifest())
    code, status = refusal(lambda: api.patch("Job", NS, "job-42-r1", patch))
    assert code == 422 and causes(status)[field].endswith("field is immutable")
    after = k8s_cluster.get("jobs", NS, "job-42-r1")
    assert after is not None and after["spec"] == before["spec"]


def test_what_a_job_may_change_changes(api: KubeApi) -> None:
    api.create(job_manifest(queue_name="team-gpu"))  # suspended, never started
    patch = {"spec": {"activeDeadlineSeconds": 1, "parallelism": 0}}
    assert api.patch("Job", NS, "job-42-r1", patch)["spec"]["parallelism"] == 0
    kueue = {"spec": {"template": {"spec": {"nodeSelector": {"pool": "h100-a"}}}}}
    patched = api.patch("Job", NS, "job-42-r1", kueue)  # Kueue's flavor assignment
    assert patched["spec"]["template"]["spec"]["nodeSelector"]["pool"] == "h100-a"


def test_a_patch_is_validated_as_the_object_it_makes(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    api.create(job_manifest())
    patch = {"metadata": {"labels": {"team": "nlp research"}}}
    code, status = refusal(lambda: api.patch("Job", NS, "job-42-r1", patch))
    assert code == 422 and "metadata.labels" in causes(status)
    stored = k8s_cluster.get("jobs", NS, "job-42-r1")
    assert stored is not None and "team" not in stored["metadata"]["labels"]
    code, status = refusal(lambda: api.patch("Job", NS, "job-42-r1", {"metadata": {"name": "x"}}))
    assert code == 400 and "does not match the name on the URL" in status["message"]


def test_pod_claim_secret_service_and_binding_keep_their_fixed_fields(
    k8s_cluster: EmulatedCluster, api: KubeApi, notebook_request: NotebookRequest
) -> None:
    apply(api, job_manifest())
    pod = k8s_cluster.pod_of(NS, "job-42-r1")
    image_only = json.dumps({"spec": {"containers": [{"name": "main", "image": "x:2"}]}})
    path = f"/api/v1/namespaces/{NS}/pods/{pod}"
    strategic = {"Content-Type": "application/strategic-merge-patch+json"}
    response = send(k8s_cluster, "PATCH", path, image_only.encode(), **strategic)
    assert response.status == 200 and response.json()["spec"]["containers"][0]["image"] == "x:2"
    # A merge patch replaces the whole list: every other field of the container would change.
    code, status = refusal(lambda: api.patch("Pod", NS, pod, json.loads(image_only)))
    assert code == 422 and "pod updates may not change fields" in causes(status)["spec"]
    code, status = refusal(lambda: api.patch("Pod", NS, pod, {"spec": {"hostNetwork": True}}))
    assert code == 422 and "pod updates may not change fields" in causes(status)["spec"]

    claim = make_workspace_claim(job=make_job_request())
    assert claim is not None
    api.create(claim)
    bigger = {"spec": {"resources": {"requests": {"storage": "999Gi"}}}}
    code, status = refusal(
        lambda: api.patch("PersistentVolumeClaim", NS, claim["metadata"]["name"], bigger)
    )
    assert code == 422 and "for bound claims" in causes(status)["spec"]

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "keys", "namespace": NS},
        "stringData": {"KEY": "one"},
        "immutable": True,
    }
    assert api.create(secret)["data"] == {"KEY": "b25l"}  # stringData folds into data
    code, status = refusal(lambda: api.patch("Secret", NS, "keys", {"data": {"KEY": "dHdv"}}))
    assert code == 422 and "when `immutable` is set" in causes(status)["data"]

    service = api.create(make_notebook_service(notebook=notebook_request))
    assert service["spec"]["clusterIP"]
    moved = {"spec": {"clusterIP": "10.0.0.1"}}
    assert refusal(lambda: api.patch("Service", NS, "nb-7", moved))[0] == 422


def test_patch_formats(k8s_cluster: EmulatedCluster, api: KubeApi) -> None:
    api.create(job_manifest())
    path = f"{JOBS}/job-42-r1"
    json_patch = [{"op": "add", "path": "/metadata/labels/team", "value": "nlp"}]
    response = send(
        k8s_cluster,
        "PATCH",
        path,
        json.dumps(json_patch).encode(),
        **{"Content-Type": "application/json-patch+json"},
    )
    assert response.status == 200 and response.json()["metadata"]["labels"]["team"] == "nlp"
    strategic = {"metadata": {"annotations": {"note": "x"}}}
    response = send(
        k8s_cluster,
        "PATCH",
        path,
        json.dumps(strategic).encode(),
        **{"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert response.status == 200 and response.json()["metadata"]["annotations"]["note"] == "x"
    response = send(k8s_cluster, "PATCH", path, b"{}", **{"Content-Type": "text/plain"})
    assert response.status == 415


# -- delete ------------------------------------------------------------------------------------


def running(cluster: EmulatedCluster, api: KubeApi) -> str:
    apply(api, job_manifest())
    pod = cluster.pod_of(NS, "job-42-r1")
    cluster.kubelet.run(NS, pod)
    return pod


def test_the_panels_delete_takes_a_jobs_pods_with_it(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    """Without `propagationPolicy` a batch/v1 Job orphans its pods: they would run on."""
    running(k8s_cluster, api)
    assert delete(api, "Job", NS, "job-42-r1") is True
    k8s_cluster.reconcile()  # the garbage collector's pass
    assert k8s_cluster.list("jobs") == k8s_cluster.list("pods") == []


def test_a_job_deleted_without_a_policy_orphans_its_pods(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    pod = running(k8s_cluster, api)
    assert send(k8s_cluster, "DELETE", f"{JOBS}/job-42-r1", b"").status == 200
    k8s_cluster.reconcile()
    orphan = k8s_cluster.get("pods", NS, pod)
    assert orphan is not None and "ownerReferences" not in orphan["metadata"]


@pytest.mark.parametrize("policy", ["Background", "Foreground", "Orphan"])
def test_propagation_policies(k8s_cluster: EmulatedCluster, api: KubeApi, policy: str) -> None:
    pod = running(k8s_cluster, api)
    body = json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy})
    assert send(k8s_cluster, "DELETE", f"{JOBS}/job-42-r1", body.encode()).status == 200
    job = k8s_cluster.get("jobs", NS, "job-42-r1")
    if policy == "Foreground":  # the owner waits, marked, for its dependents
        assert job is not None and job["metadata"]["finalizers"] == ["foregroundDeletion"]
        assert job["metadata"]["deletionTimestamp"]
    else:
        assert job is None
    k8s_cluster.reconcile()
    assert k8s_cluster.get("jobs", NS, "job-42-r1") is None
    left = [p["metadata"]["name"] for p in k8s_cluster.list("pods")]
    assert left == ([pod] if policy == "Orphan" else [])


def test_bad_delete_options_are_refused(k8s_cluster: EmulatedCluster, api: KubeApi) -> None:
    running(k8s_cluster, api)
    path = f"{JOBS}/job-42-r1"
    bogus = send(k8s_cluster, "DELETE", path, b'{"propagationPolicy": "Eventually"}')
    assert bogus.status == 422 and "supported values" in bogus.json()["message"]
    both = send(
        k8s_cluster, "DELETE", path, b'{"propagationPolicy": "Orphan", "orphanDependents": true}'
    )
    assert both.status == 422
    stale = send(k8s_cluster, "DELETE", path, b'{"preconditions": {"uid": "not-this-one"}}')
    assert stale.status == 409 and "Precondition failed" in stale.json()["message"]
    assert k8s_cluster.get("jobs", NS, "job-42-r1") is not None


# -- the Job controller ------------------------------------------------------------------------


def retrying_job(api: KubeApi, backoff_limit: int) -> None:
    manifest = job_manifest()
    manifest["spec"]["backoffLimit"] = backoff_limit
    apply(api, manifest)


def test_failed_pods_are_replaced_until_the_backoff_limit(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    retrying_job(api, 2)
    for attempt, delay in enumerate((10, 20, None), start=1):
        pods = k8s_cluster.pods_of(NS, "job-42-r1")
        assert len(pods) == attempt
        k8s_cluster.kubelet.finish(NS, pods[-1]["metadata"]["name"], exit_code=1)
        if delay is not None:  # the back-off doubles: no new pod before it has passed
            k8s_cluster.advance(delay - 1)
            assert len(k8s_cluster.pods_of(NS, "job-42-r1")) == attempt
            k8s_cluster.advance(1)
    job = k8s_cluster.get("jobs", NS, "job-42-r1")
    assert job is not None and job["status"]["failed"] == 3
    conditions = {c["type"]: c["reason"] for c in job["status"]["conditions"]}
    assert conditions == {
        "FailureTarget": "BackoffLimitExceeded",
        "Failed": "BackoffLimitExceeded",
    }
    assert len(k8s_cluster.pods_of(NS, "job-42-r1")) == 3  # no fourth


def test_a_retry_that_succeeds_completes_the_job(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    retrying_job(api, 2)
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1"), exit_code=1)
    k8s_cluster.back_off()
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1"), exit_code=0)
    job = k8s_cluster.get("jobs", NS, "job-42-r1")
    assert job is not None
    assert (job["status"]["succeeded"], job["status"]["failed"]) == (1, 1)
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet", "Complete"]


def test_a_pod_deleted_while_running_counts_as_failed(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    pod = running(k8s_cluster, api)  # the panel's Job: backoffLimit 0
    api.delete("Pod", NS, pod)
    k8s_cluster.reconcile()
    job = k8s_cluster.get("jobs", NS, "job-42-r1")
    assert job is not None and job["status"]["failed"] == 1
    assert any(c["type"] == "Failed" for c in job["status"]["conditions"])
    assert k8s_cluster.list("pods") == []


def test_pods_removed_by_a_suspension_do_not_count(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    pod = running(k8s_cluster, api)
    api.patch("Job", NS, "job-42-r1", {"spec": {"suspend": True}})
    terminating = k8s_cluster.get("pods", NS, pod)  # stopped by its kubelet, not yet gone
    assert terminating is not None and terminating["metadata"]["deletionTimestamp"]
    k8s_cluster.reconcile()
    assert k8s_cluster.list("pods") == []
    api.patch("Job", NS, "job-42-r1", {"spec": {"suspend": False}})  # no back-off to wait
    job = k8s_cluster.get("jobs", NS, "job-42-r1")
    assert job is not None and "failed" not in job["status"]
    assert len(k8s_cluster.pods_of(NS, "job-42-r1")) == 1


def test_every_manifest_the_panel_sends_is_accepted_as_is(
    k8s_cluster: EmulatedCluster, api: KubeApi
) -> None:
    """A positive control: the refusals above are not a server that refuses everything."""
    job = make_job_request()
    claim = make_workspace_claim(job=job)
    assert claim is not None
    for manifest in (claim, make_job(job=job)):
        created = api.create(copy.deepcopy(manifest))
        assert created["metadata"]["labels"].items() >= manifest["metadata"]["labels"].items()


# -- lists -------------------------------------------------------------------------------------


def test_a_list_shows_every_object_as_it_is_now(k8s_cluster: EmulatedCluster, api: KubeApi) -> None:
    """Lists are answered from an encoding kept per object version: each change, a label
    change under a selector, a delete and a re-create under the same name show at once."""
    api.create(job_manifest())
    selector = "ajuste.io/id=42"

    def listed(**query: str) -> tuple[list[Obj], int]:
        items, version = api.list("Job", NS, label_selector=query.get("labels", selector))
        return items, int(version)

    (first,), at = listed()
    assert at == k8s_cluster.store.rv
    patched = api.patch("Job", NS, "job-42-r1", {"metadata": {"annotations": {"a": "1"}}})
    (second,), later = listed()
    assert second == patched and second["metadata"]["annotations"]["a"] == "1" and later > at
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    api.patch("Job", NS, "job-42-r1", {"metadata": {"labels": {"ajuste.io/id": "43"}}})
    assert listed()[0] == []
    assert [
        j["metadata"]["labels"]["ajuste.io/id"] for j in listed(labels="ajuste.io/id=43")[0]
    ] == ["43"]
    api.delete("Job", NS, "job-42-r1")
    assert listed(labels="ajuste.io/id=43")[0] == []
    again = api.create(job_manifest())
    (third,), _ = listed()
    assert third["metadata"]["uid"] == again["metadata"]["uid"] != first["metadata"]["uid"]
