"""A local job of several nodes (issue 29): `nodes` torchrun agents on this machine, each a
"node" with the JobSet pod's launch contract (training/README.md, "The launch contract"):
`PET_NNODES`, `PET_NPROC_PER_NODE`, c10d rendezvous on 127.0.0.1:<free port>, `PET_NODE_RANK`
and `JOB_COMPLETION_INDEX` = i, gloo on CPU. torchrun sets WORLD_SIZE, RANK, MASTER_ADDR... for
the ranks as it does in a pod.

torchrun's agents restart the whole group when a rank fails, `MAX_GROUP_RESTARTS` times (the
JobSet's `failurePolicy` bound); a node whose agent gives up fails the group: the others get
SIGTERM, and the run fails with that node's words. Node 0's output is the run's log
(`output.log`, as on Kubernetes), node i's is `node-<i>.log`; each node is a run of its own for
billing (`node_runs` in the state: nodes × units × minutes, as the JobSet's pods)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy.local.state import now_iso, read_state, update_state
from deploy.manifests.jobset import MAX_GROUP_RESTARTS


def node_envs(
    *, nodes: int, per_node: int, rdzv_id: str, port: int, gpus: Sequence[int], grace_s: float
) -> list[dict[str, str]]:
    """What node i of `nodes` adds to the run's env (its share of `gpus` included)."""
    share = len(gpus) // nodes if gpus else 0
    return [
        {
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": str(per_node),
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
            "PET_RDZV_ID": rdzv_id,
            "PET_MAX_RESTARTS": str(MAX_GROUP_RESTARTS),
            "PET_NODE_RANK": str(i),
            "JOB_COMPLETION_INDEX": str(i),
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(max(1, int(grace_s))),
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus[i * share : (i + 1) * share])),
        }
        for i in range(nodes)
    ]


def node_log(run: Path, index: int) -> Path:
    return run / ("output.log" if index == 0 else f"node-{index}.log")


class NodeGroup:
    """The processes of every node, waited on as one: `pid` is node 0's (its process group is
    the run's `child_pid`), `wait` ends when every node has, `failed_node` says which node
    failed first (None: none did)."""

    def __init__(self, run: Path, plan: dict[str, Any], cwd: Path) -> None:
        self.run = run
        self.children: list[subprocess.Popen[bytes]] = []
        self.codes: dict[int, int] = {}
        self.failed_node: int | None = None
        uid = str((read_state(run) or {}).get("run_uid") or "")
        self.runs: list[dict[str, Any]] = []
        for index, extra in enumerate(plan["nodes"]):
            with open(node_log(run, index), "ab") as output:
                child = subprocess.Popen(
                    plan["argv"],
                    cwd=cwd,
                    env={**plan["env"], **extra},
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.children.append(child)
            self.runs.append({"uid": f"{uid}-node-{index}", "started_at": now_iso()})
        self.pid = self.children[0].pid
        update_state(run, node_runs=self.runs, child_pids=[c.pid for c in self.children])

    def wait(self, timeout: float | None = None) -> int:
        """The group's exit status once every node has ended: the first failed node's, else
        0. A node that fails ends the others (SIGTERM). `subprocess.TimeoutExpired` when
        `timeout` passes first, as `Popen.wait`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for index, child in enumerate(self.children):
                code = child.poll()
                if code is None or index in self.codes:
                    continue
                self.codes[index] = code
                self.runs[index] |= {"finished_at": now_iso(), "exit_code": _status(code)}
                update_state(self.run, node_runs=self.runs)
                if code != 0 and self.failed_node is None:
                    self.failed_node = index
                    self.signal(signal.SIGTERM)
            if len(self.codes) == len(self.children):
                return self.codes[self.failed_node] if self.failed_node is not None else 0
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.run.name, timeout or 0)
            time.sleep(0.05)

    def signal(self, sig: signal.Signals) -> None:
        for index, child in enumerate(self.children):
            if index not in self.codes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, sig)

    def kill_leftovers(self) -> None:
        for child in self.children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)


def _status(code: int) -> int:
    return 128 - code if code < 0 else code
