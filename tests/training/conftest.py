"""Every training test sees a machine without a GPU, whether it has one or not: the preset's
choices (device, dtype, attention kernel, checkpointing) then do not depend on where the suite
runs. Runs in a subprocess get CUDA_VISIBLE_DEVICES="" (tests/fixtures/llm.py finetune_env);
in-process tests get this fixture. A test that wants a GPU as torch reports it patches again
(test_attention.py's ampere_or_newer)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
