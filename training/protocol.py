"""The fine-tune image's progress protocol: what `python -m training.finetune` prints on stdout.

The control panel reads the job's log line by line and calls `parse_line()` on each; a line that
returns a dict is a progress event, anything else is a human log line to show as is. This module
imports only the standard library, so the panel can use it without torch.

Wire format
-----------
One JSON object per line, UTF-8, no NaN/Infinity (non-finite numbers are written as `null`).
Every event carries:

- `event`: one of `start`, `resumed`, `progress`, `eval`, `checkpoint`, `interrupted`, `done`,
  `error`
- `v`: protocol version (currently 1); fields are only ever added within a version
- `time`: Unix time in seconds (float)

Human log lines (dataset statistics, warnings) are plain text starting with `[training]`; they
are never JSON objects with an `event` key. Python warnings and tracebacks go to stderr.

Events, in the order they appear
--------------------------------
`start`, once the dataset is validated and the model is loaded. `world_size` processes on
`nodes` nodes train the run, `parallel` says how: `none` (one process), `ddp` or `fsdp`::

    {"event": "start", "v": 1, "time": 1733130000.0, "model": "/workspace/model",
     "method": "lora", "device": "cuda", "dtype": "bfloat16", "world_size": 8, "nodes": 2,
     "parallel": "ddp", "max_steps": 1200, "epochs": 3.0, "resumed_from_step": 0,
     "train_examples": 9800, "eval_examples": 200, "train_tokens": 4123456,
     "trainable_params": 41943040, "total_params": 8072204288}

`resumed`, right after `start` when the run continues from a checkpoint (after a preemption,
a restart of the group, a stop and rerun); `step` is the checkpoint's, the first step trained
is the next one::

    {"event": "resumed", "v": 1, "time": ..., "step": 400,
     "checkpoint": "/workspace/output/checkpoints/step-000400"}

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

`interrupted`, when SIGTERM (a pod deleted or preempted, `job stop`; sent to torchrun, which
passes it to every rank) stopped the run: every rank finished its step, `checkpoint` was written
at `step`, and the next run of the same --output resumes from it. The `error` event of kind
`interrupted` follows (exit code 143)::

    {"event": "interrupted", "v": 1, "time": ..., "step": 412, "signal": "SIGTERM",
     "checkpoint": "/workspace/output/checkpoints/step-000412"}

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
1 otherwise. Every event comes from one rank, the writer (local rank 0 of node 0, see
distributed.py), except an `error` of another rank, which carries that `rank`: the first error
of a run says why it failed::

    {"event": "error", "v": 1, "time": ..., "kind": "dataset", "exit_code": 2,
     "message": "train.jsonl line 7: 'messages' must be a list of {role, content} objects",
     "errors": [{"file": "/workspace/data/train.jsonl", "line": 7,
                 "message": "'messages' must be a list of {role, content} objects"}]}

Files in the output directory mirror the stream: `metrics.jsonl` holds the `progress` and `eval`
events (rewound to the checkpoint's step when a run resumes) and `status.json` the run's state
(`running`, `done`, `failed`, `interrupted`), step, max_steps and last event.

Reading it (the panel's side)
-----------------------------
Any job can print lines that look like events (a custom job too), so a reader never trusts one:
`read_event()` is `parse_line()` then `sanitize()`, which keeps only the fields the event's type
declares below, each of its declared type (non-finite or huge numbers become null or are
dropped, text loses NUL characters and lone surrogates and is clipped), and never raises.
`Snapshot` is what a reader keeps of a run: the newest `start`, `progress`, `done` and `error`
fields merged, stored as the JSON of `Snapshot.to_json()`.
"""

from __future__ import annotations

import json
import math
import time
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

PROTOCOL_VERSION = 1
EVENTS = ("start", "resumed", "progress", "eval", "checkpoint", "interrupted", "done", "error")
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
    nodes: NotRequired[int]
    parallel: NotRequired[str]
    max_steps: int
    epochs: float
    resumed_from_step: int
    train_examples: int
    eval_examples: int
    train_tokens: int
    trainable_params: int
    total_params: int


class ResumedEvent(TypedDict):
    event: Literal["resumed"]
    v: int
    time: float
    step: int
    checkpoint: str


class InterruptedEvent(TypedDict):
    event: Literal["interrupted"]
    v: int
    time: float
    step: int
    checkpoint: str
    signal: str


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


Event = (
    StartEvent
    | ResumedEvent
    | ProgressEvent
    | EvalEvent
    | CheckpointEvent
    | InterruptedEvent
    | DoneEvent
    | ErrorEvent
)


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
    """The event on this log line as printed (unchecked), or None for a human line; never
    raises (a line nested too deeply for the parser is a human line too)."""
    text = line.strip() if isinstance(line, str) else ""
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.get("event") not in EVENTS:
        return None
    return obj


def is_event(line: str) -> bool:
    """Whether a log line is a protocol event (drawn as progress, not read as text)."""
    return parse_line(line) is not None


# The reader's side: every field's type, derived from the TypedDicts above (written once).
MAX_TEXT = 2000
MAX_ERRORS = 20
MAX_NUMBER = 2**63  # beyond this a "number" is garbage, and float() of it may overflow
_EVENT_TYPES: dict[str, Any] = {
    "start": StartEvent,
    "resumed": ResumedEvent,
    "progress": ProgressEvent,
    "eval": EvalEvent,
    "checkpoint": CheckpointEvent,
    "interrupted": InterruptedEvent,
    "done": DoneEvent,
    "error": ErrorEvent,
}
FieldKind = Literal["int", "float", "text", "errors"]


def _kind(hint: Any) -> FieldKind:
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = options[0]
    if hint is int or hint is float:
        return "int" if hint is int else "float"
    if hint is str or typing.get_origin(hint) is Literal:
        return "text"
    if typing.get_origin(hint) is list:
        return "errors"
    raise TypeError(f"no reader for the field type {hint!r}")


FIELDS: dict[str, dict[str, FieldKind]] = {
    name: {f: _kind(h) for f, h in typing.get_type_hints(cls).items() if f != "event"}
    for name, cls in _EVENT_TYPES.items()
}
_DROP = object()


def clean_text(text: str) -> str:
    """Text any store takes: no NUL character (PostgreSQL refuses it), no lone surrogate."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")


def _short_text(value: Any) -> str:
    return clean_text(value)[:MAX_TEXT] if isinstance(value, str) else ""


def _number(value: Any, *, integer: bool) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _DROP
    if isinstance(value, float) and not math.isfinite(value):
        return None  # what the protocol itself writes for a diverged loss
    if abs(value) > MAX_NUMBER:
        return _DROP
    if integer:
        return int(value) if float(value).is_integer() else _DROP
    return float(value)


def _errors(value: Any) -> Any:
    if not isinstance(value, list):
        return _DROP
    errors = []
    for item in value[:MAX_ERRORS]:
        if isinstance(item, dict):
            line = _number(item.get("line"), integer=True)
            errors.append(
                {
                    "file": _short_text(item.get("file")),
                    "line": None if line is _DROP else line,
                    "message": _short_text(item.get("message")),
                }
            )
    return errors


def _field(kind: FieldKind, value: Any) -> Any:
    """The checked value, or _DROP for a value of the wrong type."""
    if kind == "errors":
        return _errors(value)
    if value is None:
        return None
    if kind == "text":
        return _short_text(value) if isinstance(value, str) else _DROP
    return _number(value, integer=kind == "int")


def sanitize(event: Any) -> dict[str, Any] | None:
    """The event with only its type's declared fields, each of its declared type (strict JSON,
    storable anywhere), or None when it is no event; never raises."""
    if not isinstance(event, dict) or event.get("event") not in FIELDS:
        return None
    fields = FIELDS[event["event"]]
    kept: dict[str, Any] = {"event": event["event"]}
    for name, value in event.items():
        clean = _field(fields[name], value) if name in fields else _DROP
        if clean is not _DROP:
            kept[name] = clean
    return kept


def read_event(line: str) -> dict[str, Any] | None:
    """The checked event on a log line, or None for a human line; never raises."""
    return sanitize(parse_line(line))


def loss_point(event: Mapping[str, Any] | None) -> tuple[int, float] | None:
    """(step, loss) of a checked `progress` event that carries both, for a loss curve."""
    if not event or event.get("event") != "progress":
        return None
    step, loss = event.get("step"), event.get("loss")
    return None if step is None or loss is None else (step, loss)
