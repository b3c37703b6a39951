"""A local job of several nodes (issue 29): `nodes` torchrun agents on this machine, each a
"node" with the JobSet pod's launch contract (training/README.md, "The launch contract"):
`PET_NNODES`, `PET_NPROC_PER_NODE`, c10d rendezvous on 127.0.0.1:<free port>, `PET_NODE_RANK`
and `JOB_COMPLETION_INDEX` = i, gloo on CPU. torchrun sets WORLD_SIZE, RANK, MASTER_ADDR... for
the ranks as it does in a pod.

A node that fails ends the others (SIGTERM) and, as JobSet's `failurePolicy` does, the whole
group starts again, `MAX_GROUP_RESTARTS` times, before the run fails with that node's words.
torchrun's own restarts stay off (`PET_MAX_RESTARTS=0`, as in the JobSet's pods): its agents
restart in place with restart counts of their own, and a node restarted for another's failure
does not count it, so after a few rounds the nodes' ranks could look for each other under
different attempts of the same rendezvous store (a connect refused, or a hang in gloo's
connect). Each group start has a fresh rendezvous (a new port, a new store). Node 0's output is
the run's log (`output.log`, as on Kubernetes), node i's is `node-<i>.log`, every start
appended; each node's start is a run of its own for billing (`node_runs` in the state: nodes ×
units × minutes, as the JobSet's pods, a restarted pod a new run)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
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
            "PET_MAX_RESTARTS": "0",  # the group restarts, every node at once (`NodeGroup`)
            "PET_NODE_RANK": str(i),
            "JOB_COMPLETION_INDEX": str(i),
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(max(1, int(grace_s))),
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus[i * share : (i + 1) * share])),
        }
        for i in range(nodes)
    ]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def node_log(run: Path, index: int) -> Path:
    return run / ("output.log" if index == 0 else f"node-{index}.log")


class NodeGroup:
    """The processes of every node, waited on as one: `pid` is node 0's (its process group is
    the run's `child_pid`), `wait` ends when every node has and no group restart is left,
    `failed_node` says which node failed first in the last start (None: none did),
    `restarts` how many times the group started again."""

    def __init__(self, run: Path, plan: dict[str, Any], cwd: Path) -> None:
        self.run, self.plan, self.cwd = run, plan, cwd
        self.uid = str((read_state(run) or {}).get("run_uid") or "")
        self.runs: list[dict[str, Any]] = []
        self.restarts = 0
        self.ending = False  # stopped from outside (`signal`): no restart
        self._start(plan["nodes"])

    def _start(self, nodes: list[dict[str, str]]) -> None:
        self.children: list[subprocess.Popen[bytes]] = []
        self.codes: dict[int, int] = {}
        self.failed_node: int | None = None
        suffix = f"-restart-{self.restarts}" if self.restarts else ""
        for index, extra in enumerate(nodes):
            with open(node_log(self.run, index), "ab") as output:
                child = subprocess.Popen(
                    self.plan["argv"],
                    cwd=self.cwd,
                    env={**self.plan["env"], **extra},
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.children.append(child)
            self.runs.append({"uid": f"{self.uid}-node-{index}{suffix}", "started_at": now_iso()})
        self.first = len(self.runs) - len(nodes)  # this start's runs in `runs`
        self.pid = self.children[0].pid
        pids = [c.pid for c in self.children]
        update_state(self.run, node_runs=self.runs, child_pid=self.pid, child_pids=pids)

    def _restart(self) -> None:
        """Every node again, on a fresh rendezvous (a new port: a new store)."""
        self.restarts += 1
        failed = self.failed_node
        reason = (
            f"the group restarts after node {failed} failed"
            f" (restart {self.restarts} of {MAX_GROUP_RESTARTS})"
        )
        update_state(self.run, reason=reason, group_restarts=self.restarts)
        endpoint = f"127.0.0.1:{free_port()}"
        self._start([extra | {"PET_RDZV_ENDPOINT": endpoint} for extra in self.plan["nodes"]])

    def wait(self, timeout: float | None = None) -> int:
        """The group's exit status once every node has ended and no restart is left: the
        first failed node's, else 0. A node that fails ends the others (SIGTERM), then the
        group starts again while restarts are left. `subprocess.TimeoutExpired` when
        `timeout` passes first, as `Popen.wait`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for index, child in enumerate(self.children):
                code = child.poll()
                if code is None or index in self.codes:
                    continue
                self.codes[index] = code
                node = self.runs[self.first + index]
                node |= {"finished_at": now_iso(), "exit_code": _status(code)}
                update_state(self.run, node_runs=self.runs)
                if code != 0 and self.failed_node is None:
                    self.failed_node = index
                    self._signal_running(signal.SIGTERM)
            if len(self.codes) == len(self.children):
                if self.failed_node is None:
                    return 0
                if self.ending or self.restarts >= MAX_GROUP_RESTARTS:
                    return self.codes[self.failed_node]
                self._restart()
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.run.name, timeout or 0)
            time.sleep(0.05)

    def _signal_running(self, sig: signal.Signals) -> None:
        for index, child in enumerate(self.children):
            if index not in self.codes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, sig)

    def signal(self, sig: signal.Signals) -> None:
        """`sig` from outside (a stop, a timeout): the group ends, no restart."""
        self.ending = True
        self._signal_running(sig)

    def kill_leftovers(self) -> None:
        for child in self.children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)


def _status(code: int) -> int:
    return 128 - code if code < 0 else code
