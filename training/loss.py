"""The training loss: summed cross-entropy over learned tokens only.

`model(labels=...)` projects every position onto the vocabulary, then throws away the masked
ones. On chat data most positions are prompt, padding or system text, and the output head is
large (4096 x 128k for Llama 3 8B, ~6% of its FLOPs, far more on small models), so this module
runs the decoder, picks the hidden states whose next token is learned, and projects only those,
in chunks whose logits are recomputed in the backward pass instead of kept (a 8k x 128k float32
logits tensor is 4 GiB). It returns the *sum*, so that the caller can normalise by the learned
tokens of the whole optimizer step, across micro-batches and ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from training.data.tokenize import IGNORE

CHUNK = 4096


def _head_loss(hidden: torch.Tensor, targets: torch.Tensor, head: nn.Module) -> torch.Tensor:
    logits = head(hidden).float()
    return F.cross_entropy(logits, targets, reduction="sum")


def chunked_loss(hidden: torch.Tensor, targets: torch.Tensor, head: nn.Module) -> torch.Tensor:
    """Sum of cross-entropy of head(hidden) against targets, CHUNK rows at a time."""
    if hidden.shape[0] <= CHUNK:
        return _head_loss(hidden, targets, head)
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], CHUNK):
        h, t = hidden[start : start + CHUNK], targets[start : start + CHUNK]
        if torch.is_grad_enabled():
            total = total + checkpoint(_head_loss, h, t, head, use_reentrant=False)
        else:
            total = total + _head_loss(h, t, head)
    return total


def _plain_head(model: Any) -> bool:
    """True when logits are exactly head(hidden): no soft-capping or scaling to reproduce."""
    config = model.config
    scaled = any(
        getattr(config, name, None) not in (None, 1.0)
        for name in ("final_logit_softcapping", "logit_scale", "logits_scaling")
    )
    return not scaled and model.get_decoder() is not model


class CausalLMLoss(nn.Module):
    """Wraps the (peft) causal LM; DDP wraps this, so gradients of both paths are synced."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.fast = _plain_head(base)
        # A tuple, not attributes: registering them again would list their parameters twice.
        self.parts = (base.get_decoder(), base.get_output_embeddings())

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        targets = labels[:, 1:]
        keep = targets != IGNORE
        if self.fast:
            decoder, head = self.parts
            hidden = decoder(
                input_ids=input_ids, position_ids=position_ids, use_cache=False
            ).last_hidden_state
            return chunked_loss(hidden[:, :-1][keep], targets[keep], head)
        logits = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits
        return F.cross_entropy(logits[:, :-1][keep].float(), targets[keep], reduction="sum")
