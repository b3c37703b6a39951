"""Read and validate JSONL datasets before anything heavy is loaded.

Standard library only: a bad line must be reported (file, line number, what is wrong) within
seconds of the pod starting, not after the model has been loaded onto a GPU.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.protocol import LineError

MAX_REPORTED = 20
ROLES = ("system", "user", "assistant", "tool")
EVAL_PREFIXES = ("eval", "valid")
FORMATS = ("text", "messages", "prompt_completion")


@dataclass(frozen=True)
class Record:
    """One valid example, with where it came from (for later error messages)."""

    format: str
    value: dict[str, Any]
    file: str
    line: int


@dataclass(eq=False)
class DatasetError(Exception):
    """Lines that cannot be used; `errors` holds the first MAX_REPORTED of `total`."""

    errors: list[LineError] = field(default_factory=list)
    total: int = 0

    def __str__(self) -> str:
        first = self.errors[0] if self.errors else {"file": "?", "line": 0, "message": "?"}
        where = f"{first['file']} line {first['line']}" if first["line"] else first["file"]
        more = f" (and {self.total - 1} more)" if self.total > 1 else ""
        return f"{where}: {first['message']}{more}"

    def add(self, file: str, line: int, message: str) -> None:
        self.total += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append({"file": file, "line": line, "message": message})


def detect_format(obj: dict[str, Any]) -> str:
    """The dataset format this object is written in, from its keys; ValueError if none."""
    if "messages" in obj:
        return "messages"
    if "prompt" in obj or "completion" in obj:
        return "prompt_completion"
    if "text" in obj:
        return "text"
    keys = ", ".join(sorted(obj)) or "none"
    raise ValueError(f"expected a 'text', 'messages' or 'prompt'/'completion' key (keys: {keys})")


def _check_message(i: int, msg: Any) -> str | None:
    if not isinstance(msg, dict):
        return f"messages[{i}] is not an object"
    role = msg.get("role")
    if role not in ROLES:
        return f"messages[{i}].role must be one of {', '.join(ROLES)} (got {role!r})"
    if not isinstance(msg.get("content"), str):
        return f"messages[{i}].content must be a string"
    return None


def _check_messages(obj: dict[str, Any]) -> str | None:
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list of {role, content} objects"
    for i, msg in enumerate(messages):
        problem = _check_message(i, msg)
        if problem:
            return problem
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        return "no assistant message with content: nothing to learn from this conversation"
    return None


def check_record(fmt: str, obj: dict[str, Any]) -> str | None:
    """What is wrong with this object in this format, or None."""
    if fmt == "messages":
        return _check_messages(obj)
    if fmt == "prompt_completion":
        for key in ("prompt", "completion"):
            if not isinstance(obj.get(key), str):
                return f"'{key}' must be a string (prompt/completion format needs both)"
        if not obj["completion"].strip():
            return "'completion' is empty: nothing to learn"
        return None
    if not isinstance(obj.get("text"), str) or not obj["text"].strip():
        return "'text' must be a non-empty string"
    return None


def _parse_line(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _read_line(path: str, lineno: int, raw: bytes, file_format: str | None) -> Record:
    """One line as a Record; ValueError says what is wrong with it."""
    obj = _parse_line(raw)
    fmt = detect_format(obj)
    if file_format and fmt != file_format:
        raise ValueError(f"format '{fmt}' differs from this file's first example ('{file_format}')")
    problem = check_record(fmt, obj)
    if problem:
        raise ValueError(problem)
    return Record(fmt, obj, path, lineno)


def read_file(path: Path, errors: DatasetError) -> list[Record]:
    """Every valid example of one file; problems are added to `errors` (reading goes on)."""
    records: list[Record] = []
    file_format: str | None = None
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue  # a trailing blank line is common and harmless
            try:
                record = _read_line(str(path), lineno, raw, file_format)
            except ValueError as exc:
                errors.add(str(path), lineno, str(exc))
                continue
            file_format = file_format or record.format
            records.append(record)
    return records


def find_files(data: str) -> tuple[list[Path], list[Path]]:
    """(training files, eval files) named by --data: one file, or the *.jsonl files of a tree."""
    root = Path(data)
    if root.is_file():
        return [root], []
    if not root.is_dir():
        raise DatasetError([{"file": data, "line": 0, "message": "no such file or directory"}], 1)
    files = sorted(p for p in root.rglob("*.jsonl") if not p.name.startswith("."))
    evals = [p for p in files if p.name.lower().startswith(EVAL_PREFIXES)]
    train = [p for p in files if p not in evals]
    if not train:
        message = "no *.jsonl training file in this directory"
        raise DatasetError([{"file": data, "line": 0, "message": message}], 1)
    return train, evals


def read_files(paths: list[Path]) -> list[Record]:
    """All examples of these files; DatasetError if any line is bad or there are none."""
    errors = DatasetError()
    records: list[Record] = []
    for path in paths:
        records.extend(read_file(path, errors))
    if not records and not errors.total:
        errors.add(", ".join(str(p) for p in paths), 0, "no examples (the file is empty)")
    if errors.total:
        raise errors
    return records


def split_eval(records: list[Record], share: float, seed: int) -> tuple[list[Record], list[Record]]:
    """Hold out `share` of the examples (at least one) for evaluation, reproducibly."""
    if share <= 0 or len(records) < 2:
        return records, []
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)  # noqa: S311 (reproducible split, not secrecy)
    n_eval = min(len(records) - 1, max(1, round(share * len(records))))
    held = set(order[:n_eval])
    train = [r for i, r in enumerate(records) if i not in held]
    return train, [r for i, r in enumerate(records) if i in held]


def load_records(
    data: str, eval_data: str | None, eval_split: float, seed: int
) -> tuple[list[Record], list[Record]]:
    """(train, eval) records for the run's options; raises DatasetError on any bad line."""
    train_files, eval_files = find_files(data)
    if eval_data:
        extra_train, extra_eval = find_files(eval_data)
        eval_files = eval_files + extra_train + extra_eval
    train = read_files(train_files)
    evals = read_files(eval_files) if eval_files else []
    if not evals:
        train, evals = split_eval(train, eval_split, seed)
    return train, evals
