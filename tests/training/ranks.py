"""Helpers for the multi-process tests: start the preset as a group, hold it at an event, find
and signal its ranks. No sleeps: every wait is for a line, a process or a FIFO."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fixtures.llm import REPO, FinetuneResult, finetune_command, finetune_env, parse_output
from training.protocol import parse_line

HOLD_DIR = Path(__file__).resolve().parent / "hold"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Hold:
    """Stops the run's writer right after it prints `event` at `step` (hold/sitecustomize.py)
    until `release()`."""

    def __init__(self, tmp: Path, event: str, step: int) -> None:
        self.fifo = tmp / f"hold-{event}-{step}"
        os.mkfifo(self.fifo)
        self.event, self.step = event, step

    @property
    def env(self) -> dict[str, str]:
        return {
            "TRAINING_HOLD": f"{self.event}:{self.step}:{self.fifo}",
            "PYTHONPATH": os.pathsep.join([str(HOLD_DIR), str(REPO)]),
        }

    def release(self) -> None:
        """Let the writer go on (waits until it is at the hold, if it is not there yet)."""
        with open(self.fifo, "w", encoding="utf-8"):
            pass


def start(
    *args: str | Path, env: dict[str, str] | None = None, torchrun: list[str] | None = None
) -> subprocess.Popen[str]:
    """The preset (`python -m training.finetune`, or under an explicit torchrun), stdout and
    stderr merged (a full stderr pipe must never block it)."""
    command = finetune_command(*args)
    if torchrun is not None:
        command = [sys.executable, "-m", "torch.distributed.run", *torchrun, *command[1:]]
    return subprocess.Popen(
        command,
        cwd=REPO,
        env={**finetune_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], event: str, step: int) -> list[str]:
    """Lines up to and including `event` at `step` (the run is held there, see Hold)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        parsed = parse_line(line)
        if parsed and parsed["event"] == event and parsed.get("step") == step:
            return lines
    raise AssertionError(f"the run ended before {event} at step {step}:\n{''.join(lines)[-3000:]}")


def finish(proc: subprocess.Popen[str], before: list[str], timeout: float = 300) -> FinetuneResult:
    rest, _ = proc.communicate(timeout=timeout)
    return parse_output(proc.returncode, "".join(before) + rest, "")


def _parent(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def ranks_of(agent: int) -> dict[int, int]:
    """{global rank: pid} of the workers torchrun's agent `agent` started."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _parent(entry) == agent:
            rank = _environ(int(entry)).get("RANK")
            if rank is not None:
                found[int(rank)] = int(entry)
    return found


def signal_group(agent: int, sig: signal.Signals) -> list[int]:
    """`sig` to torchrun's agent and to every rank it runs (torchrun starts each rank in a
    session of its own: a process group signal would not reach them)."""
    pids = [agent, *ranks_of(agent).values()]
    for pid in pids:
        os.kill(pid, sig)
    return pids


def losses(result: FinetuneResult) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in result.of("progress")}


def group_env(nproc: int, **extra: Any) -> dict[str, str]:
    """What the panel sets for a group on one machine (README: the launch contract)."""
    return {"PET_NPROC_PER_NODE": str(nproc), **{k: str(v) for k, v in extra.items()}}
