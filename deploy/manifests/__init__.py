"""Pure translation: typed requests in, Kubernetes manifest dicts out. No I/O, no client.

Every function is deterministic (same request, same dicts), so tests compare with literal
dicts, the backend can hash what it applies, and a retried task creates nothing twice.
"""

from deploy.manifests.apps import (
    make_app_autoscaler,
    make_app_deployment,
    make_app_hpa,
    make_app_scaled_object,
    make_app_service,
)
from deploy.manifests.jobs import make_job, make_push_job, make_workspace_claim
from deploy.manifests.jobset import make_jobset
from deploy.manifests.notebooks import (
    make_notebook_secret,
    make_notebook_service,
    make_notebook_statefulset,
)
from deploy.manifests.projects import (
    make_datastore_secret,
    make_limit_range,
    make_namespace,
    make_network_policies,
    make_project_objects,
    make_project_secrets,
    make_resource_quota,
    make_role_binding,
)

__all__ = [
    "make_app_autoscaler",
    "make_app_deployment",
    "make_app_hpa",
    "make_app_scaled_object",
    "make_app_service",
    "make_datastore_secret",
    "make_job",
    "make_jobset",
    "make_limit_range",
    "make_namespace",
    "make_network_policies",
    "make_notebook_secret",
    "make_notebook_service",
    "make_notebook_statefulset",
    "make_project_objects",
    "make_project_secrets",
    "make_push_job",
    "make_resource_quota",
    "make_role_binding",
    "make_workspace_claim",
]
