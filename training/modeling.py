"""Load the tokenizer and base model, and put the LoRA adapter on it."""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.options import Options


class EnvironmentProblem(Exception):
    """The machine cannot run these options (e.g. qlora without CUDA): exit code 2."""


@dataclass(frozen=True)
class Placement:
    """Where and in which precision the run computes."""

    device: torch.device
    dtype: torch.dtype
    attn: str
    checkpointing: bool

    @property
    def autocast(self) -> bool:
        return self.dtype != torch.float32


def check_environment(opts: Options) -> None:
    """Refuse early what cannot work here, before any data or weights are read."""
    if opts.method == "qlora":
        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                "--method qlora needs a CUDA GPU (bitsandbytes 4-bit kernels); none is visible. "
                "Use --method lora on CPU, or run on a GPU flavor."
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            raise EnvironmentProblem("--method qlora needs the bitsandbytes package")
    if opts.attn_implementation == "flash_attention_2" and not _flash_attn_usable():
        raise EnvironmentProblem("flash_attention_2 needs CUDA and the flash-attn package")


@functools.cache
def _flash_attn_usable() -> bool:
    """FlashAttention 2 is installed and its kernels run on this GPU.

    Compute capability alone is not enough: the image compiles the kernels for the default
    flavors' GPUs only (sm_80, sm_89, sm_90), so a newer GPU (Blackwell, sm_100) finds none.
    One tiny attention call on the device answers for the real build and the real GPU."""
    if not torch.cuda.is_available() or importlib.util.find_spec("flash_attn") is None:
        return False
    if torch.cuda.get_device_capability()[0] < 8:
        return False
    try:
        from flash_attn import flash_attn_func

        q = torch.zeros(1, 8, 1, 64, device="cuda", dtype=torch.bfloat16)
        flash_attn_func(q, q, q)
        torch.cuda.synchronize()
    except Exception:  # no kernel image for this GPU, a broken build...: use sdpa
        return False
    return True


def cpu_budget() -> int:
    """CPUs this process may really use: its affinity mask, capped by a cgroup v2 CPU quota.

    torch sizes its thread pool from the node's core count; in a pod limited to 2 CPUs on a
    64-core node, 64 OpenMP threads then spin against the quota and run 10x slower or worse.
    """
    n = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota to honour
    return n


def place(opts: Options, local_rank: int) -> Placement:
    """Pick device, dtype, attention kernel and checkpointing from the options and hardware."""
    cuda = torch.cuda.is_available()
    if not cuda and "OMP_NUM_THREADS" not in os.environ:
        # the pod's CPUs are shared by its local ranks
        torch.set_num_threads(max(1, cpu_budget() // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    # Native bf16 only: a V100 merely emulates it, more slowly than float32.
    bf16_ok = cuda and torch.cuda.is_bf16_supported(including_emulation=False)
    use_bf16 = opts.bf16 == "on" or (opts.bf16 == "auto" and bf16_ok) or opts.method == "qlora"
    dtype = torch.bfloat16 if use_bf16 else torch.float32
    attn = opts.attn_implementation
    if attn == "auto":
        attn = "flash_attention_2" if _flash_attn_usable() and use_bf16 else "sdpa"
    checkpointing = opts.gradient_checkpointing == "on" or (
        opts.gradient_checkpointing == "auto" and cuda
    )
    return Placement(device, dtype, attn, checkpointing)


def load_tokenizer(opts: Options) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(opts.model, trust_remote_code=opts.trust_remote_code)
    if tok.pad_token_id is None:
        # Padding is never learned (labels are masked), so any id will do; EOS is the usual pick.
        tok.pad_token = tok.eos_token
    return tok


def _quantization(opts: Options) -> Any:
    if opts.method != "qlora":
        return None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def load_model(opts: Options, where: Placement, on_cpu: bool = False) -> Any:
    """The frozen base model on its device (or on the CPU, for FSDP to shard), with gradient
    checkpointing if asked."""
    from transformers import AutoModelForCausalLM

    quant = _quantization(opts)
    model: Any = AutoModelForCausalLM.from_pretrained(
        opts.model,
        dtype=where.dtype,
        attn_implementation=where.attn,
        quantization_config=quant,
        # bitsandbytes quantizes while loading, straight onto this rank's GPU
        device_map={"": where.device.index or 0} if quant is not None else None,
        trust_remote_code=opts.trust_remote_code,
    )
    if quant is None and not on_cpu:
        model.to(where.device)
    model.config.use_cache = False  # a KV cache during training only costs memory
    model.requires_grad_(False)
    if where.checkpointing:
        # Non-reentrant checkpointing works with frozen inputs and DDP, no input-grad hooks.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def lora_targets(spec: str) -> str | list[str]:
    """peft's "all-linear" (every nn.Linear but the output head) or an explicit name list."""
    if spec.strip() == "all-linear":
        return "all-linear"
    return [name.strip() for name in spec.split(",") if name.strip()]


def add_lora(model: Any, opts: Options) -> Any:
    """Wrap the base model with a trainable LoRA adapter (adapter weights in float32)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=opts.rank,
        lora_alpha=opts.alpha,
        lora_dropout=opts.dropout,
        target_modules=lora_targets(opts.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def count_params(model: Any) -> tuple[int, int]:
    """(trainable, total) parameters; 4-bit weights count as the values they encode."""
    trainable = total = 0
    for param in model.parameters():
        n = param.numel()
        if param.__class__.__name__ == "Params4bit":
            n *= 2  # two 4-bit values per stored byte
        total += n
        trainable += n if param.requires_grad else 0
    return trainable, total


def merge_adapter(
    opts: Options, adapter_dir: Path, out_dir: Path, where: Placement, device: torch.device
) -> None:
    """Write base + adapter as one plain model on `device` (the CPU for a model sharded
    because one GPU cannot hold it), reloading the base unquantized (a 4-bit base cannot be
    merged exactly)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if where.dtype == torch.bfloat16 else torch.float32
    base: Any = AutoModelForCausalLM.from_pretrained(
        opts.model, dtype=dtype, trust_remote_code=opts.trust_remote_code
    )
    merged = PeftModel.from_pretrained(base.to(device), str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(out_dir)
