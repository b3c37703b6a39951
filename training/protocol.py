"""The fine-tune image's progress protocol: what `python -m training.finetune` prints on stdout.

The control panel reads the job's log line by line and calls `parse_line()` on each; a line that
returns a dict is a progress event, anything else is a human log line to show as is. This module
imports only the standard library, so the panel can use it without torch.

Wire format
-----------
One JSON object per line, UTF-8, no NaN/Infinity (non-finite numbers are written as `null`).
Every event carries:

- `event`: one of `start`, `progress`, `eval`, `checkpoint`, `done`, `error`
- `v`: protocol version (currently 1); fields are only ever added within a version
- `time`: Unix time in seconds (float)

Human log lines (dataset statistics, warnings) are plain text starting with `[training]`; they
are never JSON objects with an `event` key. Python warnings and tracebacks go to stderr.

Events, in the order they appear
--------------------------------
`start`, once the dataset is validated and the model is loaded::

    {"event": "start", "v": 1, "time": 1733130000.0, "model": "/workspace/model",
     "method": "lora", "device": "cuda", "dtype": "bfloat16", "world_size": 1,
     "max_steps": 1200, "epochs": 3.0, "resumed_from_step": 0,
     "train_examples": 9800, "eval_examples": 200, "train_tokens": 4123456,
     "trainable_params": 41943040, "total_params": 8072204288}

`progress`, every `--log-steps` optimizer steps and at the last step. `loss` is the mean loss per
supervised token since the previous progress event; `tokens_per_s` is measured over the same
window (all ranks); `eta_s` extrapolates the average step time of this process. `gpu_mem_gb`
(peak allocated on this rank since start) is present only on a GPU::

    {"event": "progress", "v": 1, "time": ..., "step": 120, "max_steps": 1200, "epoch": 0.3,
     "loss": 1.234, "learning_rate": 0.000198, "grad_norm": 0.42, "tokens_seen": 491520,
     "tokens_per_s": 10234.5, "elapsed_s": 48.1, "eta_s": 432.9, "gpu_mem_gb": 17.8}

`eval`, every `--eval-steps` steps and at the end when there is an eval set::

    {"event": "eval", "v": 1, "time": ..., "step": 200, "eval_loss": 1.31,
     "eval_perplexity": 3.71, "eval_tokens": 20480}

`checkpoint`, after a checkpoint is fully written (it is then safe to resume from it)::

    {"event": "checkpoint", "v": 1, "time": ..., "step": 200,
     "path": "/workspace/output/checkpoints/step-000200"}

`done`, once, after the adapter (and the merged model with `--merge`) is written; the process
then exits 0. `merged_path` is null without `--merge`::

    {"event": "done", "v": 1, "time": ..., "step": 1200, "train_loss": 1.02,
     "tokens_seen": 4915200, "tokens_per_s": 10120.0, "elapsed_s": 485.7,
     "adapter_path": "/workspace/output/adapter", "merged_path": null}

`error`, once, instead of `done`. `kind` says whose problem it is: `dataset` (a bad line: the
`errors` list gives file, line and message for the first problems found), `config` (bad options
or an output dir holding another run's checkpoints), `environment` (e.g. `qlora` without CUDA),
`interrupted` (SIGTERM: a checkpoint was saved first, the next run resumes from it) or
`runtime` (anything else, e.g. out of memory). `exit_code` is the process's exit status: 2 for
dataset/config/environment errors (found before any model is loaded), 143 when interrupted,
1 otherwise. Every event comes from rank 0, except an `error` of another rank (with several
GPUs), which carries that `rank`: the first error of a run says why it failed::

    {"event": "error", "v": 1, "time": ..., "kind": "dataset", "exit_code": 2,
     "message": "train.jsonl line 7: 'messages' must be a list of {role, content} objects",
     "errors": [{"file": "/workspace/data/train.jsonl", "line": 7,
                 "message": "'messages' must be a list of {role, content} objects"}]}

Files in the output directory mirror the stream: `metrics.jsonl` holds the `progress` and `eval`
events (rewound to the checkpoint's step when a run resumes) and `status.json` the run's state
(`running`, `done`, `failed`, `interrupted`), step, max_steps and last event.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Literal, NotRequired, TypedDict

PROTOCOL_VERSION = 1
EVENTS = ("start", "progress", "eval", "checkpoint", "done", "error")
LOG_PREFIX = "[training]"

ErrorKind = Literal["dataset", "config", "environment", "interrupted", "runtime"]


class StartEvent(TypedDict):
    event: Literal["start"]
    v: int
    time: float
    model: str
    method: str
    device: str
    dtype: str
    world_size: int
    max_steps: int
    epochs: float
    resumed_from_step: int
    train_examples: int
    eval_examples: int
    train_tokens: int
    trainable_params: int
    total_params: int


class ProgressEvent(TypedDict):
    event: Literal["progress"]
    v: int
    time: float
    step: int
    max_steps: int
    epoch: float
    loss: float | None
    learning_rate: float
    grad_norm: float | None
    tokens_seen: int
    tokens_per_s: float
    elapsed_s: float
    eta_s: float
    gpu_mem_gb: NotRequired[float]


class EvalEvent(TypedDict):
    event: Literal["eval"]
    v: int
    time: float
    step: int
    eval_loss: float | None
    eval_perplexity: float | None
    eval_tokens: int


class CheckpointEvent(TypedDict):
    event: Literal["checkpoint"]
    v: int
    time: float
    step: int
    path: str


class DoneEvent(TypedDict):
    event: Literal["done"]
    v: int
    time: float
    step: int
    train_loss: float | None
    tokens_seen: int
    tokens_per_s: float
    elapsed_s: float
    adapter_path: str
    merged_path: str | None


class LineError(TypedDict):
    file: str
    line: int
    message: str


class ErrorEvent(TypedDict):
    event: Literal["error"]
    v: int
    time: float
    kind: ErrorKind
    message: str
    exit_code: int
    errors: NotRequired[list[LineError]]
    rank: NotRequired[int]


Event = StartEvent | ProgressEvent | EvalEvent | CheckpointEvent | DoneEvent | ErrorEvent


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: a diverged loss is written as null rather than break parsers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def make_event(event: str, **fields: Any) -> dict[str, Any]:
    """Build an event dict with the common fields; raises on an unknown event name."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}")
    return _finite({"event": event, "v": PROTOCOL_VERSION, "time": round(time.time(), 3), **fields})


def format_event(event: dict[str, Any]) -> str:
    """One line of strict JSON, without the trailing newline."""
    return json.dumps(event, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def format_log(message: str) -> str:
    """A human log line: prefixed so that it can never be mistaken for an event."""
    return f"{LOG_PREFIX} {message}"


def parse_line(line: str) -> dict[str, Any] | None:
    """The event on this log line, or None for a human line; never raises."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("event") not in EVENTS:
        return None
    return obj
