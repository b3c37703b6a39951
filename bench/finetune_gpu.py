"""GPU benchmark of the fine-tune training step: an 8B-shaped Llama, LoRA r=16 on all linear
layers, bf16, sequences of 2048 packed tokens. Nothing is downloaded: the model is built from
a config with random weights (throughput does not depend on the weights' values).

    python bench/finetune_gpu.py                      # on a GPU machine (H200: --peak-tflops 989)
    python bench/finetune_gpu.py --nproc 8            # 1 GPU, then 8 under torchrun: scaling
    python bench/finetune_gpu.py --tiny [--nproc 2]   # a tiny model on CPU (gloo): a smoke test

It runs the entry point's own step (`training.loop.train_step`: packed rows, loss on learned
positions only, AdamW, cosine schedule) and prints tokens/s, peak GPU memory and the share of
the GPU's peak dense bf16 FLOP/s reached, counting 4·N FLOPs per token for LoRA (forward 2·N,
backward through the frozen weights 2·N, no weight gradients) and 6·N with gradient
checkpointing (the forward runs twice); N = parameters outside the embedding table. Attention
score FLOPs are not counted, so the share is a slight underestimate.

With `--nproc N` it measures one process on one GPU, then N processes (one per GPU, DDP over
NCCL as the preset runs under torchrun; `--fsdp` shards instead), each with the same
micro-batches per GPU (weak scaling), and prints the scaling efficiency: tokens/s of N GPUs
over N times the tokens/s of one (1.0 = perfect). The N-process figure counts every rank's
tokens over the slowest rank's time. Without a GPU (and without --tiny) it stops at once
with exit status 2. Results also go to $OUT/finetune_gpu.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

LLAMA_8B = {
    "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": False,
}  # fmt: skip
TINY = {
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}  # fmt: skip


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny model on CPU (float32), seconds")
    p.add_argument("--seq", type=int, default=2048, help="packed sequence length")
    p.add_argument("--batch-size", type=int, default=2, help="sequences per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument(
        "--gradient-checkpointing", choices=["on", "off"], default="on",
        help="on is the entry point's default on a GPU",
    )  # fmt: skip
    p.add_argument("--attn", default="auto", help="auto, sdpa, flash_attention_2, eager")
    p.add_argument(
        "--peak-tflops", type=float, default=989.0,
        help="GPU peak dense bf16 TFLOP/s (H200/H100 SXM: 989)",
    )  # fmt: skip
    p.add_argument(
        "--nproc", type=int, default=1,
        help="also run this many processes, one per GPU, and print the scaling efficiency",
    )  # fmt: skip
    p.add_argument("--fsdp", action="store_true", help="shard with FSDP instead of DDP")
    p.add_argument("--worker-result", default=None, help=argparse.SUPPRESS)  # a rank's file
    args = p.parse_args()
    if args.nproc < 1:
        p.error("--nproc must be at least 1")
    if args.tiny:
        args.seq, args.batch_size, args.warmup, args.steps = 128, 2, 1, 3
    return args


def options(args: argparse.Namespace) -> Any:
    from training.options import Options

    return Options(
        model="<random>", data="<synthetic>", output="<none>", rank=args.rank, alpha=2 * args.rank,
        batch_size=args.batch_size, grad_accum=args.grad_accum, max_length=args.seq,
        gradient_checkpointing=args.gradient_checkpointing, bf16="off" if args.tiny else "auto",
        attn_implementation=args.attn, max_steps=args.warmup + args.steps, log_steps=10**9,
    )  # fmt: skip


def build_model(args: argparse.Namespace, where: Any) -> Any:
    """Random weights straight on the device, in the training dtype (8B bf16: ~16 GB)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**(TINY if args.tiny else LLAMA_8B))
    torch.manual_seed(0)
    with where.device:
        model = LlamaForCausalLM._from_config(
            config, dtype=where.dtype, attn_implementation=where.attn
        )
    model.config.use_cache = False
    model.requires_grad_(False)
    if where.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def synthetic_rows(args: argparse.Namespace, vocab: int, rows_needed: int) -> Any:
    """Random documents of 10%-90% of a sequence, packed as the entry point packs them."""
    from training.data.batches import RowData
    from training.data.packing import pack
    from training.data.tokenize import finish

    rng = random.Random(0)
    examples, tokens = [], 0
    while tokens < rows_needed * args.seq:
        n = rng.randint(args.seq // 10, args.seq * 9 // 10)
        ids = [rng.randrange(3, vocab) for _ in range(n)]
        examples.append(finish(ids, list(ids), args.seq))
        tokens += n
    rows = pack([len(e.input_ids) for e in examples], args.seq)
    return RowData(examples, rows, pad_id=0)


def make_run(args: argparse.Namespace, ranks: Any) -> Any:
    from training import sharding
    from training.checkpoint import TrainState
    from training.data.packing import Layout
    from training.loop import Run
    from training.loss import CausalLMLoss
    from training.modeling import add_lora, count_params, place
    from training.prepare import make_schedule
    from training.reporting import Reporter

    opts = options(args)
    where = place(opts, ranks.local_rank)
    model = add_lora(build_model(args, where), opts)
    how = ("fsdp" if args.fsdp else "ddp") if ranks.distributed else "none"
    module = sharding.wrap(CausalLMLoss(model), model, where, ranks, how)
    trainable, total = count_params(model)
    params = [p for p in model.parameters() if p.requires_grad]
    fused = where.device.type == "cuda" and how != "fsdp"
    optimizer = torch.optim.AdamW(params, lr=2e-4, fused=fused)
    steps = args.warmup + args.steps
    rows = steps * args.batch_size * args.grad_accum * ranks.world_size
    data = synthetic_rows(args, model.config.vocab_size, rows)
    layout = Layout(len(data), args.batch_size, args.grad_accum, ranks.world_size, 0)
    run = Run(
        opts, ranks, where, Reporter(None, enabled=False), Path("."), model, module,
        optimizer, make_schedule(optimizer, opts, steps), data, layout, None, steps, TrainState(),
        parallel=how,
    )  # fmt: skip
    return run, trainable, total


def sync(run: Any) -> None:
    if run.where.device.type == "cuda":
        torch.cuda.synchronize(run.where.device)


def timed_steps(run: Any, args: argparse.Namespace) -> tuple[float, int]:
    """(seconds, real tokens) over the timed steps, after the warmup steps."""
    from training.loop import steps, train_step

    seconds, tokens = 0.0, 0
    for i, (step, micro, learned, n_tokens) in enumerate(steps(run)):
        sync(run)
        started = time.perf_counter()
        loss, _norm = train_step(run, micro, learned, step)
        loss.item()  # waits for the step
        if i >= args.warmup:
            seconds += time.perf_counter() - started
            tokens += n_tokens  # every rank's: the step's global tokens
    return max(run.ranks.all_max(seconds), 1e-9), tokens


def non_embedding_params(run: Any) -> int:
    embed = run.model.get_base_model().get_input_embeddings().weight.numel()
    return run.model.get_base_model().num_parameters() - embed


def device_name(run: Any) -> str:
    if run.where.device.type == "cuda":
        return torch.cuda.get_device_name(run.where.device)
    return "cpu"


def report(
    run: Any, args: argparse.Namespace, seconds: float, tokens: int, params: tuple[int, int]
) -> dict[str, Any]:
    n = non_embedding_params(run)
    factor = 6 if run.where.checkpointing else 4
    tps = tokens / seconds
    result: dict[str, Any] = {
        "device": device_name(run), "model": "tiny" if args.tiny else "llama-8b-shaped",
        "params_total": params[1], "params_trainable": params[0], "params_non_embedding": n,
        "dtype": str(run.where.dtype), "attn": run.where.attn,
        "gradient_checkpointing": run.where.checkpointing, "seq": args.seq,
        "batch_size": args.batch_size, "grad_accum": args.grad_accum, "timed_steps": args.steps,
        "tokens_per_s": round(tps, 1), "flops_per_token": factor * n,
        "share_of_peak": round(tps * factor * n / (args.peak_tflops * 1e12), 6),
        "peak_tflops": args.peak_tflops,
    }  # fmt: skip
    if run.where.device.type == "cuda":
        gib = 2**30
        result["peak_mem_gib"] = round(torch.cuda.max_memory_allocated(run.where.device) / gib, 2)
        result["peak_reserved_gib"] = round(
            torch.cuda.max_memory_reserved(run.where.device) / gib, 2
        )
    return result


def print_summary(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"{result['device']}: {result['model']}, LoRA r={args.rank}, {result['dtype']}, "
        f"seq {args.seq} x {args.batch_size}, checkpointing {result['gradient_checkpointing']}"
    )
    memory = result.get("peak_mem_gib", "n/a")
    share = 100 * result["share_of_peak"]
    print(
        f"tokens/s {result['tokens_per_s']:.0f}; peak memory {memory} GiB; "
        f"{share:.2f}% of {args.peak_tflops:.0f} TFLOP/s bf16 peak"
    )
    print(json.dumps(result))


def require_gpu(args: argparse.Namespace) -> None:
    """Exit 2 at once where the figures would mean nothing."""
    if args.tiny:
        return
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        print("finetune_gpu: no CUDA GPU is visible; run it on a GPU machine (--tiny: on CPU)")
        raise SystemExit(2)
    if args.nproc > gpus:
        print(f"finetune_gpu: --nproc {args.nproc} needs {args.nproc} GPUs; {gpus} visible")
        raise SystemExit(2)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """This process's run: alone, or as one rank of a torchrun group."""
    from training import distributed

    ranks = distributed.init(distributed.ranks_from_env())
    try:
        run, trainable, total = make_run(args, ranks)
        seconds, tokens = timed_steps(run, args)
        result = report(run, args, seconds, tokens, (trainable, total))
        result["nproc"] = ranks.world_size
        return result
    finally:
        distributed.shutdown(ranks)


def _without_nproc(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for arg in argv:
        if not skip and arg != "--nproc" and not arg.startswith("--nproc="):
            kept.append(arg)
        skip = arg == "--nproc"
    return kept


def measure_group(args: argparse.Namespace) -> dict[str, Any]:
    """The same measurement with --nproc processes under torchrun (this script as a rank)."""
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp, "rank0.json")
        argv = _without_nproc(sys.argv[1:])
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={args.nproc}", __file__, *argv,
            "--worker-result", str(result_file),
        ]  # fmt: skip
        subprocess.run(command, check=True)
        return dict(json.loads(result_file.read_text()))


def scaling(one: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    efficiency = group["tokens_per_s"] / (group["nproc"] * one["tokens_per_s"])
    return {
        "one": one,
        "group": group,
        "nproc": group["nproc"],
        "scaling_efficiency": round(efficiency, 4),
    }


def main() -> int:
    args = parse_args()
    require_gpu(args)
    result = measure(args)
    if args.worker_result is not None:  # one rank of measure_group's torchrun
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.worker_result).write_text(json.dumps(result))
        from training import distributed

        distributed.exit_rank(0)  # its result written: no finalization to abort it in
    print_summary(result, args)
    if args.nproc > 1:
        result = scaling(result, measure_group(args))
        print(
            f"{args.nproc} processes: tokens/s {result['group']['tokens_per_s']:.0f} "
            f"vs 1: {result['one']['tokens_per_s']:.0f}; scaling efficiency "
            f"{result['scaling_efficiency']:.2f} (1.0 = {args.nproc}x the tokens/s of one)"
        )
        print(json.dumps(result))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "finetune_gpu.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
