"""What the Kubernetes emulator costs the machine (the other benches run on it): CPU seconds of
this process, where the emulator serves, for

1. N Jobs applied through the panel's own client (deploy.kubernetes.apply) into a project
   namespace as the panel makes it (Pod Security `restricted`, ResourceQuota, LimitRange):
   every create passes the emulator's admission, every pod its controllers make too;
2. each Job's pod run by the test kubelet (two full controller passes each: the quota
   recount, the garbage collector and the kubelet's terminations included);
3. N label-selected lists of the namespace's pods.

    .venv/bin/python bench/bench_emulator.py [--jobs 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.kubernetes.api import KubeApi
from deploy.kubernetes.apply import apply
from deploy.manifests import make_job, make_project_objects
from deploy.types import FlavorSpec, JobRequest, ProjectRequest
from tests.fixtures.k8s_emulator import EmulatedCluster

NS = "ajuste-vision"
CPU = FlavorSpec(
    name="ai1-1-cpu", gpu_model="", gpus_per_unit=0, vcpu_per_unit=2, memory_gib_per_unit=4
)


def job(index: int) -> JobRequest:
    return JobRequest(
        id=str(index),
        project="vision",
        namespace=NS,
        name=f"bench-{index}",
        image="registry.example/train:1.0",
        command=("python", "train.py"),
        flavor=CPU,
        units=1,
        env={},
        volumes=(),
        timeout_s=3600,
    )


def timed(step: object) -> float:
    """CPU seconds of this process spent in `step()`."""
    before = time.process_time()
    step()  # type: ignore[operator]
    return time.process_time() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    count = parser.parse_args().jobs
    cluster = EmulatedCluster()
    client = cluster.api_client()
    api = KubeApi(client)
    project = ProjectRequest(slug="vision", namespace=NS, gpu_quota=1000, cpu_quota=10_000)
    for manifest in make_project_objects(
        project=project, service_account="ajuste-controller", service_account_namespace="ajuste"
    ):
        apply(api, manifest)

    def create() -> None:
        for index in range(count):
            apply(api, make_job(job=job(index)))

    def run() -> None:
        for pod in cluster.list("pods", NS):
            cluster.kubelet.run(NS, pod["metadata"]["name"])

    def lists() -> None:
        for _ in range(count):
            api.list("Pod", NS, label_selector="app.kubernetes.io/managed-by=ajuste")

    spent = [timed(create), timed(run), timed(lists)]
    print(
        f"{count} Jobs: applied {spent[0]:.2f} s CPU, their pods run {spent[1]:.2f} s, "
        f"{count} lists {spent[2]:.2f} s"
    )
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
