"""When the preset becomes a group, what the group's end means, who writes, and what makes
one rank's work equal to another's (fast checks; tests/training/test_ranks.py runs groups)."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import torch

from training import distributed, launch
from training.data.packing import Layout
from training.loop import seed_micro_batch


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("LOCAL_RANK", "TORCHELASTIC_RUN_ID", "JOB_COMPLETION_INDEX", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name in launch.TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_panels_pet_options_make_a_group_and_a_rank_never_relaunches(
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert launch.torchrun_args(allowed=True) is None  # one process, no GPU here
    clean_env.setenv("PET_NPROC_PER_NODE", "2")
    assert launch.torchrun_args(allowed=True) == []  # torchrun reads PET_* itself
    clean_env.setenv("LOCAL_RANK", "0")  # started by torchrun: already one of the group
    assert launch.torchrun_args(allowed=True) is None
    clean_env.delenv("LOCAL_RANK")
    clean_env.setenv("TORCHELASTIC_RUN_ID", "job-1")
    assert launch.torchrun_args(allowed=True) is None


def test_several_visible_gpus_start_one_process_each_unless_told_not_to(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setattr(torch.cuda, "is_available", lambda: True)
    clean_env.setattr(torch.cuda, "device_count", lambda: 4)
    assert launch.torchrun_args(allowed=True) == ["--standalone", "--nproc-per-node=4"]
    assert launch.torchrun_args(allowed=False) is None
    clean_env.setattr(torch.cuda, "device_count", lambda: 1)
    assert launch.torchrun_args(allowed=True) is None


def _ending(monkeypatch: pytest.MonkeyPatch, raised: BaseException | None) -> int:
    import torch.distributed.run as torchrun

    def run(args: Any) -> None:
        if raised is not None:
            raise raised

    monkeypatch.setattr(torchrun, "run", run)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what run_group would set, restored after
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return launch.run_group(["--nproc-per-node=2"], ["--model", "m"])


def test_the_groups_end_is_told_by_the_preset_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failed(code: int) -> ChildFailedError:
        failure = ProcessFailure(local_rank=1, pid=1234, exitcode=code, error_file="")
        return ChildFailedError("training.finetune", {1: failure})

    assert _ending(monkeypatch, None) == 0
    assert _ending(monkeypatch, SignalException("stop", signal.SIGTERM)) == 143
    assert _ending(monkeypatch, failed(2)) == 2  # a config error on the ranks
    assert _ending(monkeypatch, failed(-9)) == 137  # a rank killed (out of host memory)


def test_the_writer_is_node_0_of_the_pods_index_not_of_the_rendezvous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GROUP_RANK", "1")
    assert distributed.node_index() == 1
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")  # the pod's index wins over torchrun's
    assert distributed.node_index() == 0
    ranks = distributed.Ranks(rank=1, world_size=4, local_world_size=2, main=1)
    assert ranks.is_main and ranks.nodes == 2
    assert not distributed.Ranks(rank=0, world_size=4, local_world_size=2, main=1).is_main


def test_one_process_keeps_its_state_as_it_is() -> None:
    tree = {"w": torch.ones(2), "groups": [{"lr": 0.1, "params": ["a"]}]}
    assert distributed.broadcast_tree(distributed.Ranks(), tree) is tree
    skeleton = distributed._skeleton(tree)
    assert skeleton == {"w": ("__tensor__", (2,), "float32"), "groups": [tree["groups"][0]]}


def test_two_ranks_of_one_micro_batch_see_what_one_rank_of_two_sees() -> None:
    """Same global batch, same micro-batches per step, whatever the split; and each
    micro-batch's dropout mask depends on its place in the step, not on the rank."""
    one = Layout(40, 2, grad_accum=2, world_size=1, seed=5)
    two = Layout(40, 2, grad_accum=1, world_size=2, seed=5)
    assert one.steps_per_epoch == two.steps_per_epoch
    for epoch in (0, 1):
        b1, b2 = one.epoch_batches(epoch), two.epoch_batches(epoch)
        for step in range(one.steps_per_epoch):
            [mine] = one.step_batches(b1, step)
            split = two.step_batches(b2, step)
            # rank r's k-th micro-batch is the step's (k * world + r)-th
            assert mine == [split[j % 2][j // 2] for j in range(2)]

    def mask(index: int) -> torch.Tensor:
        seed_micro_batch(7, 3, index, torch.device("cpu"))
        return torch.nn.functional.dropout(torch.ones(64), 0.5)

    assert torch.equal(mask(1), mask(1)) and not torch.equal(mask(0), mask(1))
