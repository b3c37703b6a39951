"""The local backend's capacity: this machine's GPUs by product (none is an answer), those its
live runs hold, and the cores and memory jobs may use."""

from __future__ import annotations

from pathlib import Path

from deploy.local import LocalBackend
from deploy.local.gpus import Gpu
from deploy.types import ClusterCapacity, GpuPool
from tests.deploy.test_local_backend import H100, finished, py_job, running

H100_NAME = "NVIDIA H100 80GB HBM3"


def test_no_gpus_is_an_answer_with_the_machines_cpus(tmp_path: Path) -> None:
    local = LocalBackend(base_dir=tmp_path, gpus=list, cpus=3, memory_gib=5)
    assert local.cluster_capacity() == ClusterCapacity(
        backend="local", pools=(), millicpu=3000, memory_mib=5120, nodes=1
    )


def test_gpus_by_product_and_those_a_live_run_holds(tmp_path: Path) -> None:
    gpus = [Gpu(0, H100_NAME), Gpu(1, H100_NAME), Gpu(2, "NVIDIA L4")]
    local = LocalBackend(
        base_dir=tmp_path, gpus=lambda: gpus, any_command=True, cpus=8, memory_gib=16
    )
    job = py_job("import time; time.sleep(60)", flavor=H100)
    local.apply_job(job=job)
    running(local, job.ref)
    assert local.cluster_capacity().pools == (
        GpuPool(H100_NAME, total=2, in_use=1, nodes=1),
        GpuPool("NVIDIA L4", total=1, in_use=0, nodes=1),
    )
    local.stop_job(job=job)
    finished(local, job.ref)
    assert local.cluster_capacity().pools[0] == GpuPool(H100_NAME, total=2, in_use=0, nodes=1)
