"""CPU benchmark: tokens/s of `python -m training.finetune` against a plain Trainer + peft loop.

Same tiny random Llama, same tokenized chat examples (loss on assistant turns), same LoRA
(r=16 on all linear layers), same optimizer settings and CPU, one epoch each, in one run:

    .venv/bin/python bench/bench_finetune_cpu.py

Tokens/s counts real (non-padding) tokens trained per second of training-loop wall time (model
loading and tokenization excluded on both sides). The baseline pads each batch to its longest
example (DataCollatorForSeq2Seq); its batch size is chosen so that a micro-batch holds about as
many real tokens as one of ours (batch-size packed rows of max-length), so both do similar work
per optimizer step. A second baseline groups examples by length (Trainer's own remedy for
padding). Rounds are interleaved and the best of each kept, since other work may share the
CPU. Prints the figures and the ratio (goal: at least 1.0).
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


def conversations(n: int, seed: int) -> list[dict[str, Any]]:
    """Chat examples of 1 to 8 exchanges: lengths vary as in real chat data (≈30-400 tokens)."""
    from training.demo import _qa_pair

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        messages = [{"role": "system", "content": "You are a concise assistant."}]
        for _turn in range(rng.randint(1, 8)):
            question, answer = _qa_pair(rng)
            messages += [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
        rows.append({"messages": messages})
    return rows


def make_assets(root: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    from training.demo import build_model, build_tokenizer, demo_corpus, write_jsonl

    tok = build_tokenizer(demo_corpus())
    model = build_model(tok, hidden=args.hidden, layers=args.layers)
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    data = write_jsonl(root / "data" / "train.jsonl", conversations(args.examples, seed=0))
    return root / "model", data


def run_ours(
    model: Path, data: Path, out: Path, args: argparse.Namespace, packing: str = "auto"
) -> dict[str, Any]:
    """The real entry point, in its own process; its `done` event has the loop's tokens/s."""
    from training.protocol import parse_line

    options = (
        f"--epochs 1 --batch-size {args.batch_size} --max-length {args.max_length} "
        f"--save-steps 1000000 --log-steps 1000000 --no-resume --packing {packing}"
    ).split()
    paths = ["--model", str(model), "--data", str(data), "--output", str(out)]
    cmd = [sys.executable, "-m", "training.finetune", *paths, *options]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    done = [e for e in map(parse_line, proc.stdout.splitlines()) if e and e["event"] == "done"]
    if proc.returncode or not done:
        raise SystemExit(f"finetune failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return {"tokens_per_s": done[0]["tokens_per_s"], "steps": done[0]["step"]}


def trainer_rows(model_dir: Path, data: Path, args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """(tokenizer, rows): the examples exactly as the entry point tokenizes them."""
    from transformers import AutoTokenizer

    from training.data.jsonl import read_files
    from training.data.tokenize import tokenize_records

    tok = AutoTokenizer.from_pretrained(model_dir)
    examples, _ = tokenize_records(tok, read_files([data]), args.max_length)
    rows = [
        {"input_ids": e.input_ids, "labels": e.labels, "attention_mask": [1] * len(e.input_ids)}
        for e in examples
    ]
    return tok, rows


def baseline_batch_size(rows: list[Any], args: argparse.Namespace) -> int:
    """Examples per batch holding about as many real tokens as one of our packed batches."""
    mean = sum(len(r["input_ids"]) for r in rows) / len(rows)
    return max(1, round(args.batch_size * args.max_length * 0.97 / mean))


def trainer_args(out: Path, batch: int, grouped: bool) -> Any:
    """The entry point's defaults (lr, cosine, warmup, clipping, seed), in Trainer's terms."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=batch, num_train_epochs=1,
        learning_rate=2e-4, lr_scheduler_type="cosine", warmup_steps=0.03, max_grad_norm=1.0,
        logging_steps=1_000_000, save_strategy="no", report_to=[], disable_tqdm=True,
        use_cpu=True, dataloader_num_workers=0, remove_unused_columns=False, seed=42,
        train_sampling_strategy="group_by_length" if grouped else "random",
    )  # fmt: skip


def run_trainer(
    model_dir: Path, data: Path, out: Path, args: argparse.Namespace, grouped: bool = False
) -> dict[str, Any]:
    """transformers.Trainer + peft as their docs show them, on the same tokenized examples;
    `grouped` batches examples of similar length (Trainer's own remedy for padding)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, Trainer

    tok, rows = trainer_rows(model_dir, data, args)
    batch = baseline_batch_size(rows, args)
    lora = LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), lora
    )
    collator = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100)
    trainer = Trainer(
        model=model, args=trainer_args(out, batch, grouped), train_dataset=rows,
        data_collator=collator,
    )  # fmt: skip
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    tokens = sum(len(r["input_ids"]) for r in rows)
    return {"tokens_per_s": round(tokens / seconds, 1), "steps": trainer.state.global_step,
            "batch_size": batch}  # fmt: skip


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--examples", type=int, default=240)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--rounds", type=int, default=2, help="interleaved repetitions; best is kept")
    p.add_argument(
        "--threads", type=int, default=0,
        help="torch threads on both sides (0: torch's default, one per core); 1 is steadier "
        "when other work shares the CPU (OpenMP threads spin against each other)",
    )  # fmt: skip
    return p.parse_args()


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """[ours, ours packed, Trainer, Trainer grouped]: the best of interleaved rounds (a shared
    CPU's other load hits each side alike this way)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model, data = make_assets(root, args)
        rounds = []
        for r in range(args.rounds):
            rounds.append([
                run_ours(model, data, root / f"ours{r}", args),
                run_ours(model, data, root / f"packed{r}", args, packing="on"),
                run_trainer(model, data, root / f"trainer{r}", args),
                run_trainer(model, data, root / f"grouped{r}", args, grouped=True),
            ])  # fmt: skip
            print("round", r + 1, [x["tokens_per_s"] for x in rounds[-1]], flush=True)
    return [max(col, key=lambda x: x["tokens_per_s"]) for col in zip(*rounds, strict=True)]


def print_results(
    args: argparse.Namespace, ours: Any, packed: Any, base: Any, grouped: Any
) -> None:
    ratio = ours["tokens_per_s"] / base["tokens_per_s"]
    vs_grouped = ours["tokens_per_s"] / grouped["tokens_per_s"]
    print(f"machine: {os.cpu_count()} CPU cores, torch threads {args.threads or 'default'}; "
          f"best of {args.rounds} interleaved rounds")  # fmt: skip
    print(f"model: Llama hidden {args.hidden}, {args.layers} layers, random weights; "
          f"{args.examples} chat examples; LoRA r=16 all-linear; 1 epoch")  # fmt: skip
    budget = f"{args.batch_size} x {args.max_length} tokens"
    lines = [
        ("training.finetune", ours, f"micro-batches of <= {budget}, grouped by length"),
        ("  --packing on", packed, f"{args.batch_size} packed rows x {args.max_length}"),
        ("Trainer + peft", base, f"{base.get('batch_size')} padded examples"),
        ("  grouped by length", grouped, f"{grouped.get('batch_size')} padded examples"),
    ]
    for name, r, what in lines:
        print(f"{name:<19}: {r['tokens_per_s']:>9.1f} tokens/s ({r['steps']} steps; {what})")
    print(f"ratio              : {ratio:.2f} (vs grouped by length: {vs_grouped:.2f})")
    summary = {"ours": ours["tokens_per_s"], "ours_packed": packed["tokens_per_s"]}
    summary |= {"trainer": base["tokens_per_s"], "trainer_grouped": grouped["tokens_per_s"]}
    print(json.dumps(summary | {"ratio": round(ratio, 3)}))


def main() -> int:
    args = parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    if args.threads:
        import torch

        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read by the finetune subprocess
        torch.set_num_threads(args.threads)
    print_results(args, *measure(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
