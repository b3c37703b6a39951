"""The preset as a group of processes on CPU (gloo): across nodes, sharded, through a rank's
death and through preemption, each against one process at the same global batch."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from tests.fixtures.llm import QUICK, FinetuneResult, TinyLLM
from tests.training.ranks import (
    Hold,
    finish,
    free_port,
    group_env,
    losses,
    ranks_of,
    read_until,
    signal_group,
    start,
)

STEPS = list(range(1, 13))


def base(tiny_llm: TinyLLM, output: Path) -> tuple[Any, ...]:
    return ("--model", tiny_llm.model_dir, "--data", tiny_llm.messages, "--output", output, *QUICK)


def node_env(index: int, port: int) -> dict[str, str]:
    """One of two nodes of one process each, as the panel renders a JobSet's pod `index`
    (README: the launch contract). Node 1 takes the lower address, so the c10d rendezvous
    (which numbers nodes by address) makes it global rank 0: the writer must still be node 0."""
    return group_env(
        1,
        PET_NNODES=2,
        PET_RDZV_BACKEND="c10d",
        PET_RDZV_ENDPOINT=f"127.0.0.1:{port}",
        PET_RDZV_ID="test-nodes",
        PET_RDZV_CONF=f"is_host={int(index == 0)}",
        PET_LOCAL_ADDR="localhost" if index == 0 else "127.0.0.1",
        JOB_COMPLETION_INDEX=index,
    )


@pytest.fixture(scope="module")
def group_runs(
    tiny_llm: TinyLLM, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[FinetuneResult, Path]]:
    """The same 12 steps of 2 micro-batches each: one process accumulating both; two nodes
    of one process (PET_* through the preset's launcher); one node of two processes sharded
    with FSDP under an explicit static torchrun. Started together (imports overlap)."""
    root = tmp_path_factory.mktemp("groups")
    port = free_port()
    static = ["--nnodes", "1", "--nproc-per-node", "2", "--node-rank", "0"]
    static += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    procs = {
        "one": start(*base(tiny_llm, root / "one"), "--grad-accum", "2"),
        "node1": start(*base(tiny_llm, root / "node1"), env=node_env(1, port)),
        "node0": start(*base(tiny_llm, root / "node0"), env=node_env(0, port)),
        "fsdp": start(*base(tiny_llm, root / "fsdp"), "--fsdp", "on", torchrun=static),
    }
    return {name: (finish(proc, []), root / name) for name, proc in procs.items()}


def _adapter(out: Path) -> dict[str, Any]:
    return load_file(out / "adapter" / "adapter_model.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["node0", "fsdp"])
def test_two_ranks_train_as_one_process_at_the_same_global_batch(
    group_runs: dict[str, tuple[FinetuneResult, Path]], name: str
) -> None:
    one, one_out = group_runs["one"]
    result, out = group_runs[name]
    assert one.returncode == 0, "\n".join(one.lines[-20:])
    assert result.returncode == 0, "\n".join(result.lines[-30:])
    [start_event] = result.of("start")
    assert start_event["world_size"] == 2
    expected = ("ddp", 2) if name == "node0" else ("fsdp", 1)
    assert (start_event["parallel"], start_event["nodes"]) == expected
    assert one.of("start")[0]["parallel"] == "none"
    assert list(losses(result)) == STEPS
    assert losses(result) == pytest.approx(losses(one), abs=1e-3)
    assert result.of("done")[0]["step"] == 12
    assert [e["step"] for e in result.of("checkpoint")] == [3, 6, 9, 12]
    mine, reference = _adapter(out), _adapter(one_out)
    assert mine.keys() == reference.keys() and len(mine) == 28
    for key, tensor in reference.items():
        assert (mine[key] - tensor).abs().max() < 1e-4, key


@pytest.mark.slow
def test_on_several_nodes_only_node_0_writes_and_reports(
    group_runs: dict[str, tuple[FinetuneResult, Path]],
) -> None:
    node0, out0 = group_runs["node0"]
    node1, out1 = group_runs["node1"]
    assert node1.returncode == 0, "\n".join(node1.lines[-30:])
    assert node1.events == []  # every event of the run comes from node 0's log
    assert not out1.exists() or not any(out1.iterdir())  # nothing written, nothing read
    assert {p.name for p in out0.iterdir()} >= {"adapter", "checkpoints", "status.json"}
    steps = [json.loads(x)["step"] for x in (out0 / "metrics.jsonl").read_text().splitlines()]
    assert steps == STEPS
    done = node0.of("done")[0]
    assert done["tokens_seen"] == group_runs["one"][0].of("done")[0]["tokens_seen"]  # global


@pytest.mark.slow
def test_a_killed_rank_restarts_the_group_which_resumes_from_the_last_checkpoint(
    tiny_llm: TinyLLM,
    group_runs: dict[str, tuple[FinetuneResult, Path]],
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    hold = Hold(tmp_path, "checkpoint", 3)
    proc = start(*base(tiny_llm, out), env={**group_env(2, PET_MAX_RESTARTS=1), **hold.env})
    before = read_until(proc, "checkpoint", 3)
    rank1 = ranks_of(proc.pid)[1]
    os.kill(rank1, signal.SIGKILL)  # rank 0, the writer, is held after its checkpoint
    hold.release()
    result = finish(proc, before)

    assert result.returncode == 0, "\n".join(result.lines[-30:])
    starts = result.of("start")
    assert [s["resumed_from_step"] for s in starts] == [0, 3]  # torchrun restarted both
    assert [e["step"] for e in result.of("resumed")] == [3]
    after = result.events[result.events.index(starts[1]) :]
    assert [e["step"] for e in after if e["event"] == "progress"] == list(range(4, 13))
    assert result.of("done")[0]["step"] == 12
    reference = losses(group_runs["one"][0])
    assert losses(result)[12] == pytest.approx(reference[12], abs=1e-3)
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == STEPS


@pytest.mark.slow
def test_an_evicted_run_checkpoints_on_sigterm_and_resumes_as_if_never_stopped(
    tiny_llm: TinyLLM,
    group_runs: dict[str, tuple[FinetuneResult, Path]],
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    hold = Hold(tmp_path, "checkpoint", 3)
    proc = start(*base(tiny_llm, out), env={**group_env(2), **hold.env})
    before = read_until(proc, "checkpoint", 3)
    assert len(signal_group(proc.pid, signal.SIGTERM)) == 3  # torchrun's agent and 2 ranks
    hold.release()
    evicted = finish(proc, before)

    assert evicted.returncode == 143, "\n".join(evicted.lines[-30:])
    [interrupted] = evicted.of("interrupted")
    assert interrupted["step"] == 3 and interrupted["signal"] == "SIGTERM"
    assert interrupted["checkpoint"] == str(out / "checkpoints" / "step-000003")
    [error] = evicted.of("error")  # once, from the writer: not once per rank
    assert error["kind"] == "interrupted" and error["exit_code"] == 143
    assert json.loads((out / "status.json").read_text())["state"] == "interrupted"

    resumed = finish(start(*base(tiny_llm, out), env=group_env(2)), [])
    assert resumed.returncode == 0, "\n".join(resumed.lines[-30:])
    assert resumed.of("start")[0]["resumed_from_step"] == 3
    assert resumed.of("resumed")[0]["step"] == 3
    assert [e["step"] for e in resumed.of("progress")] == list(range(4, 13))
    one = group_runs["one"][0]
    assert resumed.of("done")[0]["step"] == one.of("done")[0]["step"] == 12
    assert losses(resumed)[12] == pytest.approx(losses(one)[12], rel=0.01)
    both = {**losses(evicted), **losses(resumed)}
    assert both == pytest.approx(losses(one), abs=1e-3)
