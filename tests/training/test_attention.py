"""FlashAttention is chosen only when its kernels really run on the GPU at hand."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from training import modeling
from training.options import parse_options


@pytest.fixture
def ampere_or_newer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA machine as torch reports it, without one (this machine has no GPU)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: object())
    modeling._flash_attn_usable.cache_clear()
    yield
    modeling._flash_attn_usable.cache_clear()


def _flash_attn(monkeypatch: pytest.MonkeyPatch, kernel: Any) -> None:
    module = types.ModuleType("flash_attn")
    module.flash_attn_func = kernel  # type: ignore[attr-defined]
    module.__spec__ = types.SimpleNamespace(name="flash_attn")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    monkeypatch.setattr(modeling.importlib.util, "find_spec", lambda name: object())


def test_installed_but_no_kernel_for_this_gpu_falls_back_to_sdpa(
    monkeypatch: pytest.MonkeyPatch, ampere_or_newer: None
) -> None:
    def no_kernel(*args: Any) -> None:
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    _flash_attn(monkeypatch, no_kernel)
    assert modeling._flash_attn_usable() is False


def test_a_kernel_that_runs_is_used(monkeypatch: pytest.MonkeyPatch, ampere_or_newer: None) -> None:
    calls: list[int] = []
    _flash_attn(monkeypatch, lambda *args: calls.append(len(args)))
    assert modeling._flash_attn_usable() is True
    assert calls == [3]


def test_cpu_never_picks_flash_attention() -> None:
    modeling._flash_attn_usable.cache_clear()
    opts = parse_options(["--model", "m", "--data", "d", "--output", "o"])
    assert modeling.place(opts, 0).attn == "sdpa"
