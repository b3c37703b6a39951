"""Requests shared by the deploy tests, and strict validation against a pinned Kubernetes."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from deploy.kubernetes.apply import with_hash
from deploy.manifests import make_namespace
from deploy.types import (
    EgressRule,
    FlavorSpec,
    JobRequest,
    NotebookRequest,
    ProjectRequest,
    Toleration,
)
from storage.datastore import DatastoreConfig
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.schemas import KUBERNETES_VERSION


def validate(manifest: dict[str, Any]) -> None:
    """Strict schema validation: unknown fields and wrong types fail."""
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


H100 = FlavorSpec(
    name="h100-1-gpu",
    gpu_model="H100",
    gpus_per_unit=1,
    vcpu_per_unit=26,
    memory_gib_per_unit=200,
    node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    tolerations=(Toleration(key="nvidia.com/gpu"),),
)
CPU = FlavorSpec(
    name="ai1-1-cpu", gpu_model="", gpus_per_unit=0, vcpu_per_unit=2, memory_gib_per_unit=4
)
# One 3g.40gb MIG slice of an A100 (the GPU operator's mixed strategy).
A100_MIG = FlavorSpec(
    name="a100-3g-40gb",
    gpu_model="A100",
    gpus_per_unit=1,
    vcpu_per_unit=8,
    memory_gib_per_unit=60,
    node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    resource_key="nvidia.com/mig-3g.40gb",
)
# The install every request of these tests belongs to (`ajuste.io/install` on its objects).
INSTALL = "4f1c2a9e8b7d6c05"
DATASET = VolumeSpec("corpus", "GRA", "dataset", "/workspace/data", Mode.RO)
OUTPUT = VolumeSpec("corpus", "GRA", "output", "/workspace/output", Mode.RW)


def make_job_request(**changes: Any) -> JobRequest:
    values: dict[str, Any] = {
        "id": "42",
        "project": "vision",
        "namespace": "ajuste-vision",
        "name": "llama-lora",
        "image": "registry.example/train:1.0",
        "command": ("python", "train.py", "--data", "/workspace/data"),
        "flavor": H100,
        "units": 2,
        "env": {"EPOCHS": "3"},
        "volumes": (DATASET, OUTPUT),
        "timeout_s": 3600,
        "install": INSTALL,
    }
    values.update(changes)
    return JobRequest(**values)


@pytest.fixture
def job_request() -> JobRequest:
    """h100-1-gpu, 2 GPUs, a ro and an rw volume."""
    return make_job_request()


@pytest.fixture
def notebook_request() -> NotebookRequest:
    return NotebookRequest(
        id="7",
        project="vision",
        namespace="ajuste-vision",
        name="explore",
        image="quay.io/jupyter/pytorch-notebook:cuda12-python-3.11",
        flavor=H100,
        volumes=(DATASET, OUTPUT),
        host="nb-7.usercontent.ajuste.example",
        path="/",
        token="editor-token-7",
        install=INSTALL,
    )


@pytest.fixture
def project_request() -> ProjectRequest:
    return ProjectRequest(
        slug="vision",
        namespace="ajuste-vision",
        gpu_quota=8,
        datastores=(
            DatastoreConfig("GRA", "https://s3.gra.example", "gra", "AKIA-GRA", "gra-secret"),
        ),
        egress=(EgressRule(cidr="203.0.113.0/24", ports=(443,)),),
        install=INSTALL,
    )


def project_namespace(cluster: EmulatedCluster, slug: str = "vision") -> str:
    """`ajuste-<slug>`, made as `ensure_project` makes it: the API server refuses objects in a
    namespace that does not exist, and the panel ensures the project before each run."""
    project = ProjectRequest(slug=slug, namespace=f"ajuste-{slug}", gpu_quota=8)
    cluster.create(with_hash(make_namespace(project=project)))
    return project.namespace


@pytest.fixture
def vision_namespace(k8s_cluster: EmulatedCluster) -> str:
    """The namespace of the requests above (`ajuste-vision`), already there."""
    return project_namespace(k8s_cluster)
