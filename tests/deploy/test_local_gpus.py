"""Which GPUs the local backend finds (NVML, else nvidia-smi) and which a flavor may use."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import replace
from typing import Any

import pytest

from deploy.local import gpus
from deploy.local.gpus import Gpu, detect_gpus, gpu_matches, pick_gpus
from tests.deploy.conftest import CPU, H100

L4 = replace(H100, name="l4-1-gpu", gpu_model="L4", node_selector={gpus.PRODUCT_LABEL: "NVIDIA-L4"})
MACHINE = [Gpu(0, "NVIDIA L40S"), Gpu(1, "NVIDIA L4"), Gpu(2, "NVIDIA L4")]
SMI_OUTPUT = "0, NVIDIA L40S\n1, NVIDIA L4\n2, NVIDIA H100 80GB HBM3\n"


@pytest.mark.parametrize(
    ("model", "product", "name", "expected"),
    [
        ("L4", "NVIDIA-L4", "NVIDIA L4", True),
        ("L4", "NVIDIA-L4", "NVIDIA L40S", False),
        ("L4", "", "NVIDIA L40S", False),
        ("L4", "", "NVIDIA L4", True),
        ("l40s", "", "NVIDIA L40S", True),
        ("A10", "", "NVIDIA A100-SXM4-80GB", False),
        ("A100", "", "NVIDIA A100-SXM4-80GB", True),
        ("RTX 4090", "", "NVIDIA GeForce RTX 4090", True),
        ("H100", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", True),
        ("H100", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 PCIe", False),
        ("H100", "NVIDIA-H100-80GB-HBM3-SHARED", "NVIDIA H100 80GB HBM3", True),
        ("V100S", "Tesla-V100S-PCIE-32GB", "Tesla V100S-PCIE-32GB", True),
        ("", "", "NVIDIA L4", False),
    ],
)
def test_a_gpu_matches_its_product_or_its_whole_model_name(
    model: str, product: str, name: str, expected: bool
) -> None:
    selector = {gpus.PRODUCT_LABEL: product} if product else {}
    flavor = replace(H100, gpu_model=model, node_selector=selector)
    assert gpu_matches(flavor, name) is expected


def test_pick_gpus_skips_other_models_and_busy_ones() -> None:
    assert pick_gpus(L4, 1, MACHINE, busy=set()) == ([1], "")
    assert pick_gpus(L4, 1, MACHINE, busy={1}) == ([2], "")
    assert pick_gpus(L4, 2, MACHINE, busy={2}) == (
        None,
        "waiting for 2 free L4 GPU(s): 1 free here",
    )
    assert pick_gpus(CPU, 1, MACHINE, busy=set()) == ([], "")
    missing, why = pick_gpus(H100, 1, MACHINE, busy=set())
    assert missing is None and why.startswith("this machine has no H100 GPU (h100-1-gpu needs 1)")


def test_a_mig_flavor_is_not_given_whole_gpus() -> None:
    mig = replace(H100, resource_key="nvidia.com/mig-1g.10gb")
    machine = [Gpu(0, "NVIDIA H100 80GB HBM3")]
    assert pick_gpus(replace(mig, resource_key="nvidia.com/gpu"), 1, machine, set()) == ([0], "")
    assert pick_gpus(mig, 1, machine, busy=set()) == (
        None,
        "h100-1-gpu asks for MIG slices (nvidia.com/mig-1g.10gb): they run on the Kubernetes "
        "backend only, this machine hands out whole GPUs",
    )


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError


def fake_smi(monkeypatch: pytest.MonkeyPatch, result: str | Exception) -> list[list[str]]:
    """nvidia-smi on PATH answering `result`; the argv of each call is recorded."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if isinstance(result, Exception):
            raise result
        return subprocess.CompletedProcess(argv, 0, stdout=result, stderr="")

    monkeypatch.setattr(gpus.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpus.subprocess, "run", run)
    return calls


@pytest.mark.usefixtures("no_nvml")
def test_nvidia_smi_csv_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_smi(monkeypatch, SMI_OUTPUT + "\nNo devices were found\n")
    assert detect_gpus() == [
        Gpu(0, "NVIDIA L40S"),
        Gpu(1, "NVIDIA L4"),
        Gpu(2, "NVIDIA H100 80GB HBM3"),
    ]
    assert calls == [["/usr/bin/nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"]]


@pytest.mark.usefixtures("no_nvml")
def test_no_driver_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(monkeypatch, subprocess.CalledProcessError(9, "nvidia-smi"))
    assert detect_gpus() == []
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    assert detect_gpus() == []


class FakeNvmlError(Exception):
    pass


def fake_nvml(names: list[Any], *, fail: bool = False) -> types.ModuleType:
    """The few pynvml calls detect_gpus makes (old versions return bytes)."""
    module = types.ModuleType("pynvml")

    def init() -> None:
        if fail:
            raise FakeNvmlError("Driver Not Loaded")

    module.NVMLError = FakeNvmlError  # type: ignore[attr-defined]
    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(names)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda handle: names[handle]  # type: ignore[attr-defined]
    return module


def test_nvml_is_asked_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([b"NVIDIA L4", "NVIDIA H200"]))
    calls = fake_smi(monkeypatch, SMI_OUTPUT)
    assert detect_gpus() == [Gpu(0, "NVIDIA L4"), Gpu(1, "NVIDIA H200")]
    assert calls == []


def test_a_failing_nvml_falls_back_to_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["NVIDIA L4"], fail=True))
    fake_smi(monkeypatch, SMI_OUTPUT)
    assert [gpu.name for gpu in detect_gpus()] == [
        "NVIDIA L40S",
        "NVIDIA L4",
        "NVIDIA H100 80GB HBM3",
    ]
