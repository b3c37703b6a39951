"""Data parallelism across the ranks: DDP (a whole model per rank) or FSDP (each rank keeps a
shard of every weight, gradient and optimizer state, and gathers a layer's weights only while
it computes it).

`--fsdp auto` (the default) picks FSDP when the base model's weights would fill more than
FIT_SHARE of one GPU's memory, so that a model one GPU cannot hold still trains on several;
otherwise DDP, which is faster when the model fits. `--fsdp on|off` forces it. FSDP here is
PyTorch's FSDP2 (`fully_shard`), one unit per decoder layer plus the root; with bf16 weights
it gathers and computes in bf16 and reduces gradients in float32.

With FSDP every rank loads the model onto the CPU first and keeps only its shards on the GPU:
host memory must hold one copy of the weights per local process while loading.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from training.distributed import Ranks
from training.modeling import Placement
from training.options import Options, OptionsError

FIT_SHARE = 0.6  # weights above this share of a GPU leave too little for activations


def model_bytes(opts: Options, where: Placement) -> int:
    """The base model's weights in the training dtype, counted on the meta device (nothing
    is read but the config)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(opts.model, trust_remote_code=opts.trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=opts.trust_remote_code)
    return sum(p.numel() for p in model.parameters()) * where.dtype.itemsize


def strategy(opts: Options, where: Placement, ranks: Ranks) -> str:
    """ "none" (one process), "ddp" or "fsdp"."""
    if opts.fsdp == "on" and opts.method == "qlora":
        raise OptionsError("--fsdp on does not work with --method qlora (4-bit weights)", "--fsdp")
    if not ranks.distributed:
        return "none"
    if opts.fsdp != "auto":
        return "fsdp" if opts.fsdp == "on" else "ddp"
    if where.device.type != "cuda" or opts.method == "qlora":
        return "ddp"
    gpu = torch.cuda.get_device_properties(where.device).total_memory
    return "fsdp" if model_bytes(opts, where) > FIT_SHARE * gpu else "ddp"


def _layers(model: Any) -> list[Any]:
    """The decoder layers of a (peft-wrapped) causal LM: the units FSDP gathers one by one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:
        raise OptionsError("--fsdp: this model's decoder layers were not found", "--fsdp")
    return list(layers)


def wrap(module: torch.nn.Module, model: Any, where: Placement, ranks: Ranks, how: str) -> Any:
    """The module the loop trains: `module` itself, in DDP, or sharded in place by FSDP."""
    if how == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [ranks.local_rank] if where.device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids)
    if how != "fsdp":
        return module
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(where.device.type, (ranks.world_size,))
    policy = MixedPrecisionPolicy()
    if where.dtype != torch.float32:
        policy = MixedPrecisionPolicy(param_dtype=where.dtype, reduce_dtype=torch.float32)
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(module, mesh=mesh, mp_policy=policy)  # embeddings, final norm, output head
    return module


def no_sync(module: Any, how: str, last: bool) -> contextlib.AbstractContextManager[Any]:
    """Skip the gradient reduction on all but the step's last micro-batch."""
    if how == "ddp" and not last:
        return module.no_sync()  # type: ignore[no-any-return]
    if how == "fsdp":
        module.set_requires_gradient_sync(last)
    return contextlib.nullcontext()


def for_eval(module: Any, how: str) -> Any:
    """The module to evaluate with: DDP's inner one (no gradient collectives); FSDP's own
    (its forward gathers the weights, so every rank must run as many forwards)."""
    return module.module if how == "ddp" else module


def full_norm(norm: torch.Tensor) -> torch.Tensor:
    """clip_grad_norm_ of sharded gradients returns a DTensor: the whole norm, as a tensor."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
