"""bench/finetune_gpu.py's parts that run without a GPU: its refusal, and --tiny on CPU, alone
and as 2 processes under torchrun (gloo), which is the --nproc scaling path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures.llm import REPO, finetune_env

BENCH = REPO / "bench" / "finetune_gpu.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=REPO, env=finetune_env(),
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.slow  # imports torch to ask for CUDA
@pytest.mark.parametrize("args", [(), ("--nproc", "4")])
def test_without_a_gpu_it_stops_at_once_and_says_why(args: tuple[str, ...]) -> None:
    proc = bench(*args)
    assert proc.returncode == 2
    assert "no CUDA GPU is visible" in proc.stdout
    assert "tokens/s" not in proc.stdout


@pytest.mark.slow
def test_the_scaling_path_runs_on_cpu_with_two_processes() -> None:
    proc = bench("--tiny", "--nproc", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["one"]["nproc"], result["group"]["nproc"], result["nproc"]) == (1, 2, 2)
    assert result["one"]["tokens_per_s"] > 0 and result["group"]["tokens_per_s"] > 0
    expected = result["group"]["tokens_per_s"] / (2 * result["one"]["tokens_per_s"])
    assert result["scaling_efficiency"] == pytest.approx(expected, abs=1e-4)
    assert "scaling efficiency" in proc.stdout
