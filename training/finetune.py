"""Entry point of the fine-tune image:
`python -m training.finetune --model <dir or hub id> --data <file or dir> --output <dir> [options]`.

Order matters: options, environment (qlora needs CUDA) and every dataset line are checked
before anything heavy is loaded, so that mistakes cost seconds, not GPU time; each failure is
one `error` event (see protocol.py) and exit code 2. Then the run becomes a group of processes
when asked (launch.py: torchrun's PET_* variables, or several GPUs visible), tokenizes, loads
the model, resumes from the newest checkpoint in --output if there is one, trains and writes
the adapter.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.data.jsonl import DatasetError, load_records
from training.options import Options, OptionsError, parse_options
from training.reporting import Reporter, rewind_metrics

EXIT_USAGE = 2
EXIT_INTERRUPTED = 143  # 128 + SIGTERM, what the pod would report had we not caught it


def _quiet() -> None:
    """Progress bars are noise in a job log; events carry the progress. Set before imports."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Deprecation notices of transformers/peft are for their developers, not for a job's log.
    warnings.filterwarnings("ignore", category=FutureWarning)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # pods pipe stdout: flush each line


def _fail(reporter: Reporter, kind: str, message: str, code: int, **extra: Any) -> int:
    if not reporter.enabled:
        # Another rank than 0 failed (out of memory on one GPU, say): rank 0 may only hang in
        # a collective, so this rank says why on stdout (rank 0 alone writes status.json).
        reporter = Reporter(None, stream=reporter.stream)
        extra["rank"] = int(os.environ.get("RANK", "0"))
    reporter.log(f"error ({kind}): {message}")
    reporter.emit("error", kind=kind, message=message, exit_code=code, **extra)
    return code


def _stop_flag() -> Callable[[], bool]:
    """SIGTERM (pod deletion, `job stop`) asks the loop to checkpoint and exit at a step end."""
    flag = {"stop": False}

    def handler(_signum: int, _frame: object) -> None:
        flag["stop"] = True

    signal.signal(signal.SIGTERM, handler)
    return lambda: flag["stop"]


class _Follow(Exception):
    """The writer refused the run (and said why): this rank ends quietly with the same code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _resume_point(opts: Options, fingerprint: dict[str, Any], log: Reporter) -> Path | None:
    """The checkpoint to resume from, if any; refuse a checkpoint of a different run."""
    from training import checkpoint
    from training.prepare import fingerprint_changes

    output = Path(opts.output)
    checkpoint.remove_partial(output)
    path = checkpoint.latest(output) if opts.resume else None
    if path is None:
        return None
    try:
        saved = checkpoint.read_state(path).fingerprint
    except checkpoint.CheckpointError as exc:
        raise OptionsError(f"{exc}; use a new --output or pass --no-resume") from None
    changed = fingerprint_changes(saved, fingerprint)
    if changed:
        raise OptionsError(
            f"{opts.output} holds checkpoints of a different run (changed: {', '.join(changed)}); "
            "use a new --output or pass --no-resume"
        )
    log.log(f"resuming from {path}")
    return path


def _agreed_resume_point(opts: Options, data: Any, ranks: Any, log: Reporter) -> Path | None:
    """The writer alone looks at --output (other nodes have no copy of it) and tells the
    others whether, and from which step, the run resumes, or that it is refused."""
    answer: tuple[str | None, str | None] = (None, None)
    if ranks.is_main:
        try:
            path = _resume_point(opts, data.fingerprint, log)
            answer = (str(path) if path else None, None)
        except OptionsError as exc:
            answer = (None, str(exc))
    path, refused = ranks.broadcast_object(answer)
    if refused is not None:
        if ranks.is_main:
            raise OptionsError(refused)
        raise _Follow(EXIT_USAGE)
    return Path(path) if path else None


def _train(opts: Options, argv: list[str], reporter: Reporter) -> int:
    if Path(opts.model).is_dir():
        os.environ["HF_HUB_OFFLINE"] = "1"  # a model from a volume never needs the hub
    records = load_records(opts.data, opts.eval_data, opts.eval_split, opts.seed)
    from training import distributed, launch, modeling  # torch: only once the data is known good

    modeling.check_environment(opts)
    group = launch.torchrun_args(opts.distributed)
    if group is not None:
        reporter.log("starting the ranks under torchrun: " + (" ".join(group) or "PET_* options"))
        return launch.run_group(group, argv)
    ranks = distributed.init(distributed.ranks_from_env())
    reporter.enabled = ranks.is_main
    try:
        return _train_ranked(opts, records, ranks, reporter)
    except _Follow as exc:
        return exc.code
    finally:
        distributed.shutdown(ranks)


def _build_run(opts: Options, records: Any, ranks: Any, reporter: Reporter) -> tuple[Any, Any]:
    """(Run, tokenizer): data tokenized and packed, model loaded, state resumed if any."""
    from training import checkpoint, modeling
    from training.checkpoint import TrainState
    from training.loop import Run
    from training.prepare import build_trainable, prepare_data, seed_everything

    where = modeling.place(opts, ranks.local_rank)
    tok = modeling.load_tokenizer(opts)
    data = prepare_data(opts, tok, records, ranks, reporter, where.attn)
    resume = _agreed_resume_point(opts, data, ranks, reporter)
    reporter.log(f"loading {opts.model} on {where.device} ({str(where.dtype)[6:]}, {where.attn})")
    seed_everything(opts.seed)  # the same LoRA init on every rank and every run
    parts = build_trainable(opts, where, ranks, data.max_steps)
    run = Run(
        opts, ranks, where, reporter, Path(opts.output), parts.model, parts.module,
        parts.optimizer, parts.scheduler, data.train, data.layout, data.evalset, data.max_steps,
        TrainState(fingerprint=data.fingerprint), parallel=parts.parallel,
    )  # fmt: skip
    if resume is not None:
        run.state = checkpoint.load(resume, run.model, run.optimizer, run.scheduler, ranks)
        run.state.fingerprint = data.fingerprint
        run.last_checkpoint = resume
        if ranks.is_main:
            rewind_metrics(run.output, run.state.step)
    return run, tok


def _emit_start(run: Any, resumed_from: Path | None) -> None:
    from training.modeling import count_params

    opts, where, train = run.opts, run.where, run.train
    trainable, total = count_params(run.model)
    run.reporter.emit(
        "start", model=opts.model, method=opts.method, device=where.device.type,
        dtype=str(where.dtype)[6:], world_size=run.ranks.world_size, nodes=run.ranks.nodes,
        parallel=run.parallel, max_steps=run.max_steps,
        epochs=round(run.max_steps / run.layout.steps_per_epoch, 4),
        resumed_from_step=run.state.step, train_examples=len(train.examples),
        eval_examples=len(run.evalset.examples) if run.evalset else 0,
        train_tokens=sum(len(ex.input_ids) for ex in train.examples),
        trainable_params=trainable, total_params=total,
    )  # fmt: skip
    if resumed_from is not None:
        run.reporter.emit("resumed", step=run.state.step, checkpoint=str(resumed_from))


def _train_ranked(opts: Options, records: Any, ranks: Any, reporter: Reporter) -> int:
    from training.loop import train

    run, tok = _build_run(opts, records, ranks, reporter)
    _emit_start(run, run.last_checkpoint)
    if train(run, _stop_flag_for(ranks)):
        return _finish(run, tok)
    at = run.state.step
    reporter.emit("interrupted", step=at, checkpoint=str(run.last_checkpoint), signal="SIGTERM")
    if not ranks.is_main:
        return EXIT_INTERRUPTED  # the writer says it, once for the whole group
    message = f"stopped by SIGTERM at step {at}; the next run resumes from it"
    return _fail(reporter, "interrupted", message, EXIT_INTERRUPTED)


def _stop_flag_for(ranks: Any) -> Callable[[], bool]:
    """Every rank must stop at the same step, or their checkpoint collectives would hang."""
    local = _stop_flag()
    if not ranks.distributed:
        return local
    return lambda: ranks.all_sum([float(local())])[0] > 0


def _merge(run: Any, adapter: Path) -> Path:
    """Free the training copy of the model, then write base + adapter as one model."""
    import gc

    import torch

    from training.modeling import merge_adapter

    sharded = run.parallel == "fsdp"  # a model one GPU cannot hold is merged on the CPU
    run.model = run.module = run.optimizer = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    merged = run.output / "merged"
    device = torch.device("cpu") if sharded else run.where.device
    merge_adapter(run.opts, adapter, merged, run.where, device)
    return merged


def _finish(run: Any, tok: Any) -> int:
    """Write the adapter (and merged model), then the `done` event."""
    from training.checkpoint import gather
    from training.prepare import save_adapter

    adapter, merged = run.output / "adapter", None
    speed = run.window.process_tokens / max(1e-9, run.window.process_seconds())
    weights, _ = gather(run.model, None)  # every rank: a collective when sharded
    if run.ranks.is_main:
        save_adapter(run.model, tok, adapter, weights)
        if run.opts.merge:
            merged = _merge(run, adapter)
            tok.save_pretrained(merged)
    run.ranks.barrier()
    run.reporter.emit(
        "done", step=run.state.step, train_loss=run.state.mean_loss,
        tokens_seen=run.state.tokens_seen, tokens_per_s=round(speed, 1),
        elapsed_s=round(run.state.elapsed_s, 2), adapter_path=str(adapter),
        merged_path=str(merged) if merged else None,
    )  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    _quiet()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_options(argv)
    except OptionsError as exc:
        return _fail(Reporter(None), "config", str(exc), EXIT_USAGE)
    # until the group has elected its writer (distributed.init), rank 0 speaks for it
    rank = int(os.environ.get("RANK", "0"))
    reporter = Reporter(Path(opts.output), enabled=rank == 0)
    try:
        return _train(opts, argv, reporter)
    except DatasetError as exc:
        return _fail(reporter, "dataset", str(exc), EXIT_USAGE, errors=exc.errors)
    except OptionsError as exc:
        return _fail(reporter, "config", str(exc), EXIT_USAGE)
    except Exception as exc:
        from training.checkpoint import CheckpointError

        if isinstance(exc, CheckpointError):
            if not reporter.enabled:
                return EXIT_USAGE  # the writer read the checkpoint and says why, once
            message = f"{exc}; use a new --output or pass --no-resume"
            return _fail(reporter, "config", message, EXIT_USAGE)
        from training.modeling import EnvironmentProblem

        if isinstance(exc, EnvironmentProblem):
            return _fail(reporter, "environment", str(exc), EXIT_USAGE)
        traceback.print_exc()
        return _fail(reporter, "runtime", f"{type(exc).__name__}: {exc}", 1)


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a torchrun rank: torch is loaded already
        from training import distributed

        distributed.exit_rank(code)  # the reporter flushed each event; checkpoints are closed
    raise SystemExit(code)
