"""What the panel hands to deploy/ for a cluster: egress to its datastores and the admin's
list, the ingress namespace, pull secrets and workspace settings from the environment."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref, project_request
from controlpanel.engine.reconcile import reconcile
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.request import job_request
from controlpanel.projects.models import Project
from deploy import names
from deploy.egress import parse_egress
from deploy.types import EgressRule
from tests.fixtures.jobs import submit


def test_project_pods_may_reach_the_datastores_and_the_admin_list(
    project: Project, panel_s3: Any, data_bucket: Any, settings: Any
) -> None:
    port = int(panel_s3.endpoint_url.rsplit(":", 1)[1])
    settings.KUBERNETES_EGRESS = parse_egress("10.0.0.0/8:3128, 127.0.0.1/32")
    request = project_request(project)
    assert request.egress == (
        EgressRule(cidr="10.0.0.0/8", ports=(3128,)),
        EgressRule(cidr="127.0.0.1/32"),
        EgressRule(cidr="127.0.0.1/32", ports=(port,)),  # LOCAL, where its bucket is
    )
    assert request.panel_namespace == settings.KUBERNETES_NAMESPACE
    settings.KUBERNETES_EGRESS_FROM_DATASTORES = False
    assert project_request(project).egress == settings.KUBERNETES_EGRESS


def test_jobs_carry_the_pull_secrets_and_workspace_settings(
    project: Project, owner: Any, panel_s3: Any, settings: Any, k8s_jobs: Any
) -> None:
    settings.KUBERNETES_IMAGE_PULL_SECRETS = ("registry-creds",)
    settings.KUBERNETES_STORAGE_CLASS = "fast-ssd"
    settings.JOB_WORKSPACE_GIB = 500
    request = job_request(submit(project, owner))
    assert request.image_pull_secrets == ("registry-creds",)
    assert (request.storage_class, request.workspace_gib) == ("fast-ssd", 500)


def test_project_pods_ask_only_the_named_resolvers(project: Project, settings: Any) -> None:
    from deploy.egress import parse_cidrs, parse_dns, parse_node_local_dns

    settings.KUBERNETES_DNS = parse_dns("kube-system/k8s-app=coredns")
    settings.KUBERNETES_NODE_LOCAL_DNS = parse_node_local_dns("169.254.20.10")
    settings.KUBERNETES_EGRESS_ALLOW_PRIVATE = parse_cidrs("10.20.0.0/16")
    request = project_request(project)
    assert request.dns == (
        EgressRule(namespace="kube-system", pod_labels={"k8s-app": "coredns"}),
        EgressRule(cidr="169.254.20.10/32"),
    )
    assert request.private_allowed == ("10.20.0.0/16",)


@pytest.mark.k8s
def test_a_mig_job_asks_for_its_slices_and_the_quota_holds_them(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    """The enabled flavors' MIG profiles each get a quota line (an extended resource a quota
    leaves out is unlimited); a disabled flavor's profile does not."""
    for name, resource, enabled in (
        ("a100-1g", "nvidia.com/mig-1g.10gb", True),
        ("a100-3g", "nvidia.com/mig-3g.40gb", False),
    ):
        Flavor.objects.create(
            name=name,
            gpu_model="A100",
            vcpu_per_unit=2,
            memory_gib_per_unit=8,
            resource_key=resource,
            enabled=enabled,
        )
    assert project_request(project).mig_resources == ("nvidia.com/mig-1g.10gb",)
    job = submit(project, owner, flavor="a100-1g", gpu=1)
    assert admit_jobs(project_id=project.pk) == [str(job.pk)]
    reconcile(str(job.pk))
    hard = k8s_cluster.get("resourcequotas", "ajuste-alpha", "ajuste-quota")["spec"]["hard"]
    gpus = {key: value for key, value in hard.items() if key.startswith("requests.nvidia")}
    assert gpus == {
        "requests.nvidia.com/gpu": str(project.gpu_quota),
        "requests.nvidia.com/mig-1g.10gb": str(project.gpu_quota),
    }
    job.refresh_from_db()
    manifest = k8s_cluster.get("jobs", "ajuste-alpha", names.job_name(job_ref(job)))
    [main] = manifest["spec"]["template"]["spec"]["containers"]
    one = {"cpu": "2", "memory": "8Gi", "nvidia.com/mig-1g.10gb": "1"}
    assert main["resources"] == {"requests": one, "limits": one}
