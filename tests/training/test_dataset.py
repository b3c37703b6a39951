"""Dataset reading and validation: formats detected from keys, bad lines reported precisely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.data.jsonl import DatasetError, load_records, read_files, split_eval

GOOD = {
    "text": {"text": "hello there"},
    "messages": {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    },
    "prompt_completion": {"prompt": "2+2=", "completion": " 4"},
}


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", sorted(GOOD))
def test_the_format_is_detected_from_the_keys(tmp_path: Path, fmt: str) -> None:
    path = write_lines(tmp_path / "d.jsonl", [GOOD[fmt], "", GOOD[fmt]])
    records = read_files([path])
    assert [r.format for r in records] == [fmt, fmt]
    assert [r.line for r in records] == [1, 3]  # blank line skipped, numbering kept


BAD_LINES = [
    ("messages", "{not json", "invalid JSON"),
    ("messages", "[1, 2]", "expected a JSON object, got list"),
    (
        "messages",
        {"input": "x", "output": "y"},
        "expected a 'text', 'messages' or 'prompt'/'completion' key",
    ),
    ("text", {"text": ""}, "'text' must be a non-empty string"),
    ("text", {"text": 3}, "'text' must be a non-empty string"),
    ("prompt_completion", {"prompt": "q"}, "'completion' must be a string"),
    ("prompt_completion", {"prompt": "q", "completion": "  "}, "'completion' is empty"),
    ("messages", {"messages": []}, "'messages' must be a non-empty list"),
    ("messages", {"messages": "hi"}, "'messages' must be a non-empty list"),
    (
        "messages",
        {"messages": [{"role": "bot", "content": "x"}]},
        "messages[0].role must be one of",
    ),
    (
        "messages",
        {"messages": [{"role": "user", "content": 5}]},
        "messages[0].content must be a string",
    ),
    (
        "messages",
        {"messages": [{"role": "user", "content": "hi"}]},
        "no assistant message with content",
    ),
    ("messages", GOOD["text"], "format 'text' differs from this file's first example ('messages')"),
]


@pytest.mark.parametrize(("good", "line", "message"), BAD_LINES)
def test_a_bad_line_is_reported_with_file_line_and_reason(
    tmp_path: Path, good: str, line: Any, message: str
) -> None:
    path = write_lines(tmp_path / "train.jsonl", [GOOD[good], GOOD[good], line])
    with pytest.raises(DatasetError) as caught:
        read_files([path])
    err = caught.value
    assert err.total == 1
    assert err.errors[0]["file"] == str(path)
    assert err.errors[0]["line"] == 3
    assert message in err.errors[0]["message"]
    assert str(err).startswith(f"{path} line 3: ")


def test_invalid_utf8_is_reported_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n')
    with pytest.raises(DatasetError) as caught:
        read_files([path])
    assert caught.value.errors[0]["line"] == 2
    assert "not UTF-8" in caught.value.errors[0]["message"]


def test_all_bad_lines_are_counted_and_the_first_twenty_listed(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", ["{"] * 25)
    with pytest.raises(DatasetError) as caught:
        read_files([path])
    assert caught.value.total == 25
    assert [e["line"] for e in caught.value.errors] == list(range(1, 21))
    assert "(and 24 more)" in str(caught.value)


def test_an_empty_file_or_a_missing_path_is_an_error(tmp_path: Path) -> None:
    empty = write_lines(tmp_path / "empty.jsonl", [])
    with pytest.raises(DatasetError, match="no examples"):
        read_files([empty])
    with pytest.raises(DatasetError, match="no such file or directory"):
        load_records(str(tmp_path / "missing"), None, 0.0, 0)
    write_lines(tmp_path / "notes" / "readme.txt", ["x"])
    with pytest.raises(DatasetError, match=r"no \*\.jsonl training file"):
        load_records(str(tmp_path / "notes"), None, 0.0, 0)


def test_a_directory_splits_training_and_eval_files_by_name(tmp_path: Path) -> None:
    write_lines(tmp_path / "a" / "train.jsonl", [GOOD["text"]] * 3)
    write_lines(tmp_path / "b.jsonl", [GOOD["prompt_completion"]] * 2)
    write_lines(tmp_path / "eval.jsonl", [GOOD["text"]])
    write_lines(tmp_path / "validation.jsonl", [GOOD["text"]])
    train, evals = load_records(str(tmp_path), None, 0.5, 0)
    assert len(train) == 5  # the split is not applied when eval files exist
    assert sorted(Path(r.file).name for r in evals) == ["eval.jsonl", "validation.jsonl"]


def test_the_eval_split_is_reproducible_and_disjoint(tmp_path: Path) -> None:
    rows = [{"text": f"example {i}"} for i in range(20)]
    records = read_files([write_lines(tmp_path / "d.jsonl", rows)])
    train, evals = split_eval(records, 0.2, seed=7)
    again = split_eval(records, 0.2, seed=7)[1]
    assert len(evals) == 4 and len(train) == 16
    assert [r.line for r in evals] == [r.line for r in again]
    assert not {r.line for r in evals} & {r.line for r in train}
    assert split_eval(records[:1], 0.5, seed=7) == (records[:1], [])
