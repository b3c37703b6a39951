"""`make run`'s jobs of several nodes (issue 29): the local backend runs `nodes` torchrun
agents on this machine with the JobSet pod's launch contract (c10d on 127.0.0.1, gloo on
CPU), node 0's output as the run's log and node i's beside it, each node a run for billing;
a stop ends every node; a node that fails restarts the whole group, as JobSet does, and fails
the run once the restarts are spent."""

from __future__ import annotations

import ast
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.local import LocalBackend
from deploy.local.group import NodeGroup, node_log
from deploy.local.paths import run_dir
from deploy.local.state import is_alive, read_state
from deploy.local.supervisor import JOB_NICE
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
    restarting = wait_until(local, job.ref, lambda o: "group restarts" in o.reason, timeout_s=200)
    assert restarting.phase is Phase.RUNNING, restarting
    assert restarting.reason.startswith("the group restarts after node 1 failed (restart 1 of ")
    done = wait_until(local, job.ref, lambda o: o.phase.is_final, timeout_s=400)
    assert done.phase is Phase.FAILED
    after = f"(after {MAX_GROUP_RESTARTS} group restarts)"
    assert done.reason.startswith(f"node 1: exit code 1 {after}: "), done.reason
    # The node's last words are words, not the rule that ends torchrun's failure report.
    assert not done.reason.endswith("="), done.reason
    # The group started 1 + MAX_GROUP_RESTARTS times, every node each time, on a fresh
    # rendezvous: torchrun's own restarts are off, so each start's ranks say restart 0.
    node0 = [line for line in all_lines(local, job.ref) if line.startswith("rank ")]
    run = run_dir(local.base, job.ref)
    node1 = [line for line in node_log(run, 1).read_text().splitlines() if line.startswith("rank")]
    starts = MAX_GROUP_RESTARTS + 1
    assert [line[: len("rank 1 of 2 sum 3 restart 0")] for line in node1] == [
        "rank 1 of 2 sum 3 restart 0"
    ] * starts, node1
    # Node 0 prints as node 1 does, but the SIGTERM for node 1's failure may reach it first.
    assert 1 <= len(node0) <= starts and all(" restart 0 " in line for line in node0), node0
    # Billing: every node's every start is a run of its own, each ended.
    uid = done.run_uid
    assert [r.uid for r in done.replica_runs or ()] == [
        f"{uid}-node-{node}{f'-restart-{k}' if k else ''}" for k in range(starts) for node in (0, 1)
    ]
    assert all(r.finished_at is not None for r in done.replica_runs or ())
    assert [r.exit_code for r in done.replica_runs or ()][1::2] == [1] * starts


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


def group_plan(code: str, nodes: int = 2) -> dict[str, object]:
    argv = [sys.executable, "-c", code]
    extra = [{"PET_NODE_RANK": str(i), "PET_RDZV_ENDPOINT": "127.0.0.1:1"} for i in range(nodes)]
    return {"argv": argv, "env": dict(os.environ), "nodes": extra}


def test_a_failing_node_restarts_every_node_on_a_fresh_rendezvous_then_fails(
    tmp_path: Path,
) -> None:
    # Node 1 fails at once; node 0 would run a minute: each failure ends node 0 and starts
    # both again, MAX_GROUP_RESTARTS times, each start on a new rendezvous endpoint.
    said = "import os,sys,time; print(os.environ['PET_RDZV_ENDPOINT'], flush=True)"
    code = f"{said}; sys.exit(3) if os.environ['PET_NODE_RANK'] == '1' else time.sleep(60)"
    group = NodeGroup(tmp_path, group_plan(code), tmp_path)
    assert group.wait(timeout=60) == 3
    assert (group.failed_node, group.restarts) == (1, MAX_GROUP_RESTARTS)
    endpoints = node_log(tmp_path, 1).read_text().split()
    assert len(endpoints) == MAX_GROUP_RESTARTS + 1 == len(set(endpoints)), endpoints
    assert endpoints[0] == "127.0.0.1:1"
    state = read_state(tmp_path) or {}
    assert state["group_restarts"] == MAX_GROUP_RESTARTS
    runs = state["node_runs"]
    assert [r["exit_code"] for r in runs][1::2] == [3] * (MAX_GROUP_RESTARTS + 1)
    assert all(r["exit_code"] == 128 + 15 for r in runs[0::2]), runs  # SIGTERM'd each time
    assert state["child_pids"] == [c.pid for c in group.children]


def test_a_group_stopped_from_outside_does_not_restart(tmp_path: Path) -> None:
    group = NodeGroup(tmp_path, group_plan("import time; time.sleep(60)"), tmp_path)
    group.signal(signal.SIGTERM)  # a stop, a timeout: every node ends with a failing code
    assert group.wait(timeout=30) == -signal.SIGTERM
    assert group.restarts == 0
    assert len((read_state(tmp_path) or {})["node_runs"]) == 2


def test_a_jobs_nodes_run_below_the_panels_priority(local: LocalBackend) -> None:
    """A job of several nodes shares the machine with the panel: every node at JOB_NICE."""
    job = py_job("import os; print('nice', os.nice(0))", id="nice", nodes=2)
    local.apply_job(job=job)
    done = wait_until(local, job.ref, lambda o: o.phase.is_final)
    assert done.phase is Phase.SUCCEEDED, done
    run = run_dir(local.base, job.ref)
    said = [node_log(run, i).read_text().split() for i in (0, 1)]
    assert [words[words.index("nice") + 1] for words in said] == [str(JOB_NICE)] * 2
