"""Gradient checkpointing is really on when asked for (the default on a GPU): transformers only
checkpoints layers that are in training mode, and `from_pretrained` leaves them in eval mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from training.distributed import Ranks
from training.modeling import place
from training.options import parse_options
from training.prepare import build_trainable


def _checkpointed_calls(model: Any) -> list[str]:
    calls: list[str] = []
    for name, module in model.named_modules():
        if getattr(module, "gradient_checkpointing", False):
            inner = module._gradient_checkpointing_func

            def counted(*args: Any, _inner: Any = inner, _name: str = name, **kw: Any) -> Any:
                calls.append(_name)
                return _inner(*args, **kw)

            module._gradient_checkpointing_func = counted
    return calls


def test_layers_are_checkpointed_during_training(tiny_llm: Any, tmp_path: Path) -> None:
    argv = ["--model", str(tiny_llm.model_dir), "--data", str(tiny_llm.text)]
    opts = parse_options([*argv, "--output", str(tmp_path), "--gradient-checkpointing", "on"])
    where = place(opts, 0)
    assert where.checkpointing
    trainable = build_trainable(opts, where, Ranks(), max_steps=1)
    calls = _checkpointed_calls(trainable.model)
    ids = torch.randint(0, 100, (2, 16))
    trainable.model(input_ids=ids, labels=ids).loss.backward()
    layers = trainable.model.get_base_model().config.num_hidden_layers
    assert len(calls) == layers, calls
