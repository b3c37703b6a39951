"""The job kind on a cluster (`ClusterDriver`): a run is its Job (or its JobSet, several nodes),
the Job's pods and the finalize push Jobs with their pods."""

from __future__ import annotations

from dataclasses import replace

from deploy import names
from deploy.kubernetes import jobsets
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.driver import Group, newest_creation, read_or_none
from deploy.kubernetes.jobsets import earlier_pods, observe_run
from deploy.kubernetes.listing import group_job, job_objects
from deploy.kubernetes.trust import controlled_by
from deploy.types import ObservedWorkload, WorkloadRef


class JobDriver:
    cacheable = True  # `observe_job` is pure: the sweep keeps what it mapped

    def state(self, api: KubeApi, ref: WorkloadRef) -> ObservedWorkload:
        return observe_run(ref, job_objects(api, ref))

    def observe_group(self, api: KubeApi, ref: WorkloadRef, group: Group) -> ObservedWorkload:
        objects = group_job(api, ref, group["jobs"], group["pods"], group["jobsets"])
        created = newest_creation([*group["jobsets"], *group["jobs"], *group["pods"]])
        return observe_run(ref, objects, created_at=created)

    def after_event(
        self, api: KubeApi, ref: WorkloadRef, deleted_pod: Obj | None
    ) -> ObservedWorkload:
        """A job pod that just went away still tells how its run ended."""
        objects = job_objects(api, ref)
        if deleted_pod is not None and objects.jobset is not None:
            # A pod of an earlier attempt of the group, deleted by its restart: its end.
            earlier = earlier_pods(ref, objects.jobset, objects.job, [deleted_pod])
            objects = replace(objects, earlier=[*objects.earlier, *earlier])
        if deleted_pod is not None and controlled_by(deleted_pod, objects.job):
            uids = {p["metadata"].get("uid") for p in objects.pods}
            if deleted_pod["metadata"].get("uid") not in uids:
                objects = replace(
                    objects, pods=[*objects.pods, deleted_pod], events=[], workload=None
                )
        return observe_run(ref, objects)

    def main_pods(self, api: KubeApi, ref: WorkloadRef, pods: list[Obj]) -> list[Obj]:
        owner = read_or_none(api, "Job", ref.namespace, names.job_name(ref))
        if owner is None:  # several nodes: the JobSet's child; node 0's log
            owner = read_or_none(api, "Job", ref.namespace, jobsets.child_job_name(ref))
            pods = jobsets.rank_zero(pods)
        if owner is not None and not names.belongs(owner, ref.install):
            owner = None
        return [pod for pod in pods if controlled_by(pod, owner)]


DRIVER = JobDriver()
