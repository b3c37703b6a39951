"""Command-line options of `python -m training.finetune` (standard library only: parsing the
options must not cost a torch import, so that usage errors are reported at once)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any, NoReturn


class OptionsError(Exception):
    """A bad option value; reported as an `error` event of kind `config`, exit code 2.
    `option` is the option at fault (`--rank`) when one is."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Options:
    """Everything a run needs, as parsed from the command line."""

    model: str
    data: str
    output: str
    method: str = "lora"
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str = "all-linear"
    learning_rate: float = 2e-4
    warmup_ratio: float = 0.03
    warmup_steps: int = -1
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 2048
    packing: str = "auto"
    gradient_checkpointing: str = "auto"
    bf16: str = "auto"
    attn_implementation: str = "auto"
    seed: int = 42
    eval_split: float = 0.0
    eval_data: str | None = None
    eval_steps: int = -1
    save_steps: int = 200
    save_total_limit: int = 2
    log_steps: int = 10
    merge: bool = False
    resume: bool = True
    trust_remote_code: bool = False
    distributed: bool = True
    fsdp: str = "auto"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show "(default: X)" where a value has a default; flags and required options say it in
    their own words (argparse would print "(default: None)" or "(default: True)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or isinstance(action.default, bool) or "default" in text:
            return text
        return str(super()._get_help_string(action))


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; we raise instead so the caller can emit an event."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(exit_on_error=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise OptionsError(message)

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        try:
            return super().parse_known_args(args, namespace)
        except argparse.ArgumentError as err:  # a bad value: say which option has it
            option = (err.argument_name or "").split("/")[0] or None
            raise OptionsError(str(err), option) from None


def _add_io(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("inputs and outputs")
    g.add_argument("--model", required=True, help="base model: a local directory or a hub id")
    g.add_argument(
        "--data",
        required=True,
        help="a JSONL file, or a directory of *.jsonl files (files whose name starts with "
        "'eval' or 'valid' become the eval set); one example per line with the keys 'text', "
        "or 'messages' (chat; loss on assistant turns), or 'prompt' and 'completion' "
        "(loss on the completion)",
    )
    g.add_argument("--output", required=True, help="output directory (created if missing)")
    g.add_argument("--eval-data", default=None, help="JSONL file or directory for evaluation")
    g.add_argument(
        "--merge",
        action="store_true",
        help="also write base model + adapter merged into OUTPUT/merged (default: off)",
    )
    g.add_argument(
        "--no-resume",
        dest="resume",
        action="store_false",
        help="start over even if --output holds checkpoints (default: resume from the newest)",
    )


def _add_adapter(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("adapter")
    g.add_argument(
        "--method",
        choices=["lora", "qlora"],
        default="lora",
        help="lora, or qlora (4-bit nf4 base, double quantization, bf16 compute; needs CUDA)",
    )
    g.add_argument("--rank", type=int, default=16, help="LoRA rank r")
    g.add_argument("--alpha", type=int, default=32, help="LoRA alpha (scale = alpha / r)")
    g.add_argument("--dropout", type=float, default=0.05, help="dropout on the LoRA input")
    g.add_argument(
        "--target-modules",
        default="all-linear",
        help="comma-separated module names to adapt, or all-linear (every linear layer "
        "except the output head)",
    )


def _add_optimisation(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("optimisation (AdamW, cosine schedule with linear warmup)")
    g.add_argument("--learning-rate", "--lr", type=float, default=2e-4, help="peak learning rate")
    g.add_argument("--warmup-ratio", type=float, default=0.03, help="warmup share of the steps")
    g.add_argument(
        "--warmup-steps", type=int, default=-1, help="warmup steps; overrides --warmup-ratio"
    )
    g.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay")
    g.add_argument(
        "--max-grad-norm", type=float, default=1.0, help="gradient clipping; 0 disables it"
    )
    g.add_argument("--epochs", type=float, default=1.0, help="passes over the training set")
    g.add_argument(
        "--max-steps", type=int, default=-1, help="optimizer steps; overrides --epochs when > 0"
    )
    g.add_argument(
        "--batch-size",
        type=int,
        default=4,
        help="per device and micro-batch: this many --max-length sequences' worth of tokens",
    )
    g.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    g.add_argument("--seed", type=int, default=42, help="seed for data order, split and init")


def _add_sequence(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sequences")
    g.add_argument(
        "--max-length", type=int, default=2048, help="tokens per sequence; longer are truncated"
    )
    g.add_argument(
        "--packing",
        choices=["auto", "on", "off"],
        default="auto",
        help="on: pack whole examples into --max-length sequences, each attending only to "
        "itself (best with flash_attention_2); off: one example per sequence, micro-batches of "
        "similar lengths (best with sdpa); auto: on with flash_attention_2, else off",
    )


def _add_speed(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory and speed")
    g.add_argument(
        "--gradient-checkpointing",
        choices=["auto", "on", "off"],
        default="auto",
        help="recompute activations in the backward pass to save memory; auto = on with CUDA",
    )
    g.add_argument(
        "--bf16",
        choices=["auto", "on", "off"],
        default="auto",
        help="bfloat16 weights and autocast; auto = on when the GPU supports it, else float32",
    )
    g.add_argument(
        "--attn-implementation",
        choices=["auto", "sdpa", "eager", "flash_attention_2"],
        default="auto",
        help="attention kernel; auto = flash_attention_2 when installed on CUDA, else sdpa",
    )
    g.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run model code shipped with the model (default: off)",
    )
    g.add_argument(
        "--no-distributed",
        dest="distributed",
        action="store_false",
        help="stay one process when several GPUs are visible (default: relaunch under torchrun, "
        "one process per GPU)",
    )
    g.add_argument(
        "--fsdp",
        choices=["auto", "on", "off"],
        default="auto",
        help="with several processes, shard weights, gradients and optimizer state over them "
        "(FSDP) instead of a whole model per process (DDP); auto = on when the model's weights "
        "would fill more than 60%% of one GPU",
    )


def _add_reporting(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("evaluation, checkpoints and progress")
    g.add_argument(
        "--eval-split",
        type=float,
        default=0.0,
        help="share of the training examples held out for evaluation (0 = none)",
    )
    g.add_argument(
        "--eval-steps", type=int, default=-1, help="evaluate every N steps (default: --save-steps)"
    )
    g.add_argument("--save-steps", type=int, default=200, help="checkpoint every N steps")
    g.add_argument("--save-total-limit", type=int, default=2, help="checkpoints kept")
    g.add_argument("--log-steps", type=int, default=10, help="progress event every N steps")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m training.finetune",
        description="LoRA/QLoRA fine-tune of a causal LM on a JSONL dataset. Prints one JSON "
        "progress event per line on stdout (see training/protocol.py).",
        formatter_class=_HelpFormatter,
    )
    _add_io(p)
    _add_adapter(p)
    _add_optimisation(p)
    _add_sequence(p)
    _add_speed(p)
    _add_reporting(p)
    return p


def _check(opts: Options) -> None:
    positive = ("rank", "batch_size", "grad_accum", "max_length", "save_steps", "log_steps")
    for name in positive:
        if getattr(opts, name) < 1:
            option = f"--{name.replace('_', '-')}"
            raise OptionsError(f"{option} must be at least 1", option)
    if opts.save_total_limit < 1:
        raise OptionsError("--save-total-limit must be at least 1", "--save-total-limit")
    if not 0.0 <= opts.eval_split < 1.0:
        raise OptionsError("--eval-split must be in [0, 1)", "--eval-split")
    if not 0.0 <= opts.dropout < 1.0:
        raise OptionsError("--dropout must be in [0, 1)", "--dropout")
    if opts.max_steps <= 0 and opts.epochs <= 0:
        raise OptionsError("give --epochs > 0 or --max-steps > 0")
    if opts.learning_rate <= 0:
        raise OptionsError("--learning-rate must be positive", "--learning-rate")


def parse_options(argv: list[str] | None = None) -> Options:
    """Parse and check the command line; raises OptionsError with a one-line reason."""
    ns = build_parser().parse_args(argv)
    opts = Options(**vars(ns))
    _check(opts)
    return opts
