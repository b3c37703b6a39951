"""`make run`'s jobs of several nodes (issue 29): the local backend runs `nodes` torchrun
agents on this machine with the JobSet pod's launch contract (c10d on 127.0.0.1, gloo on
CPU), node 0's output as the run's log and node i's beside it, each node a run for billing;
a stop ends every node; a node that fails (after torchrun's group restarts) fails the run."""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.local import LocalBackend
from deploy.local.group import node_log
from deploy.local.paths import run_dir
from deploy.local.state import is_alive, read_state
from deploy.manifests.jobset import MAX_GROUP_RESTARTS
from deploy.types import JobRequest, ObservedWorkload, Phase, WorkloadRef
from tests.deploy.test_local_backend import all_lines, py_job

SCRIPT = str(Path(__file__).with_name("gloo_allreduce.py"))


def gloo_job(job_id: str, nodes: int = 2, **env: str) -> JobRequest:
    command = ("python", "-m", "torch.distributed.run", SCRIPT)
    return py_job("", id=job_id, command=command, nodes=nodes, env=env)


@pytest.fixture
def local(tmp_path: Path) -> LocalBackend:
    return LocalBackend(base_dir=tmp_path / "local", grace_s=5.0, gpus=list, any_command=True)


def wait_until(
    backend: LocalBackend,
    ref: WorkloadRef,
    test: Callable[[ObservedWorkload], bool],
    timeout_s: float = 20,
) -> ObservedWorkload:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        observed = backend.observe_job(ref=ref)
        if test(observed):
            return observed
        time.sleep(0.1)
    raise AssertionError(f"still {observed}")


def _said(line: str) -> dict[str, str]:
    return ast.literal_eval(line[line.index("{") :])


@pytest.mark.slow
def test_two_nodes_all_reduce_and_each_is_a_run(local: LocalBackend) -> None:
    job = gloo_job("two")
    local.apply_job(job=job)
    done = wait_until(local, job.ref, lambda o: o.phase.is_final, timeout_s=120)
    run = run_dir(local.base, job.ref)
    assert done.phase is Phase.SUCCEEDED, (done, node_log(run, 1).read_text()[-2000:])
    # Node 0's log is the run's log, as on Kubernetes; node 1's is its own file.
    [zero] = [line for line in all_lines(local, job.ref) if line.startswith("rank ")]
    [one] = [line for line in node_log(run, 1).read_text().splitlines() if line.startswith("rank")]
    assert zero.startswith("rank 0 of 2 sum 3 restart 0 ")
    assert one.startswith("rank 1 of 2 sum 3 restart 0 ")
    # torchrun's own contract for the ranks: the rendezvous host as MASTER_ADDR, the node's
    # rank from PET_NODE_RANK, the completion index as an Indexed Job's pod has it.
    assert _said(zero)["MASTER_ADDR"] in ("localhost", "127.0.0.1")
    assert _said(one)["MASTER_ADDR"] == _said(zero)["MASTER_ADDR"]
    assert _said(zero)["GROUP_RANK"] == "0" == _said(zero)["JOB_COMPLETION_INDEX"]
    assert _said(one)["GROUP_RANK"] == "1" == _said(one)["JOB_COMPLETION_INDEX"]
    # Billing: each node a run of its own with its own start and end.
    runs = done.replica_runs or ()
    assert [r.uid for r in runs] == [f"{done.run_uid}-node-0", f"{done.run_uid}-node-1"]
    assert all(r.finished_at and r.finished_at >= r.started_at and r.exit_code == 0 for r in runs)


@pytest.mark.slow
def test_a_node_that_keeps_failing_fails_the_group_after_its_restarts(
    local: LocalBackend,
) -> None:
    job = gloo_job("fails", FAIL_NODE="1", HOLD_S="30")
    local.apply_job(job=job)
    done = wait_until(local, job.ref, lambda o: o.phase.is_final, timeout_s=400)
    assert done.phase is Phase.FAILED
    assert done.reason.startswith("node 1: exit code 1"), done.reason
    # torchrun restarted the group: node 1's agent MAX_GROUP_RESTARTS times (its own count),
    # node 0's ranks with it each time (a new rendezvous round, which node 0 does not count).
    node0 = [line for line in all_lines(local, job.ref) if line.startswith("rank ")]
    run = run_dir(local.base, job.ref)
    node1 = [line for line in node_log(run, 1).read_text().splitlines() if line.startswith("rank")]
    # Each attempt's rank says its restart count, from 0 up. An attempt may also fail before
    # its rank prints: gloo's connect to a rank 0 still tearing down the last round is refused
    # ("Gloo connectFullMesh failed"), which torchrun counts as that attempt's failure too. So
    # the printed counts run 0, 1, … without a gap, at least one restart, none past the limit.
    restarts = [int(line.split(" restart ")[1].split(" ")[0]) for line in node1]
    assert restarts == list(range(len(restarts))), restarts
    assert 2 <= len(restarts) <= MAX_GROUP_RESTARTS + 1, restarts
    assert 2 <= len(node0) <= MAX_GROUP_RESTARTS + 1, node0
    assert all(r.finished_at is not None for r in done.replica_runs or ())


@pytest.mark.slow
def test_a_stop_ends_every_node(local: LocalBackend) -> None:
    job = gloo_job("stop", HOLD_S="120")
    local.apply_job(job=job)
    run = run_dir(local.base, job.ref)
    wait_until(
        local,
        job.ref,
        lambda o: (
            "rank 1 of 2" in (node_log(run, 1).read_text() if node_log(run, 1).exists() else "")
        ),
        timeout_s=90,
    )
    pids = (read_state(run) or {})["child_pids"]
    assert len(pids) == 2
    local.stop_job(job=job)
    done = wait_until(local, job.ref, lambda o: o.phase.is_final, timeout_s=60)
    assert done.phase is Phase.STOPPED
    assert not any(is_alive(pid, None) for pid in pids)
    assert len(done.replica_runs or ()) == 2
    assert all(r.finished_at is not None for r in done.replica_runs or ())


def test_one_node_stays_one_process_without_the_group_contract(local: LocalBackend) -> None:
    job = py_job(
        "import os; print(sorted(k for k in os.environ if k.startswith('PET_')))", id="one"
    )
    local.apply_job(job=job)
    done = wait_until(local, job.ref, lambda o: o.phase.is_final)
    assert done.phase is Phase.SUCCEEDED and done.replica_runs is None
    assert all_lines(local, job.ref) == ["[]"]
    assert "child_pids" not in (read_state(run_dir(local.base, job.ref)) or {})
