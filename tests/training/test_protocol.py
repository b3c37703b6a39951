"""The progress protocol the panel parses: strict JSON events, never confused with log lines."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.fixtures.llm import REPO
from training.protocol import EVENTS, format_event, format_log, make_event, parse_line


@pytest.mark.parametrize("event", EVENTS)
def test_every_event_round_trips_through_parse_line(event: str) -> None:
    line = format_event(make_event(event, step=3))
    parsed = parse_line(line + "\n")
    assert parsed is not None
    assert parsed["event"] == event
    assert parsed["v"] == 1
    assert parsed["step"] == 3
    assert isinstance(parsed["time"], float)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "plain text",
        format_log("dataset: 10 examples"),
        format_log('{"event": "done"}'),
        '{"loss": 1.0}',
        '{"event": "finished"}',
        '["event", "done"]',
        '{"event": "done"',
        "{not json}",
    ],
)
def test_lines_that_are_not_events_parse_to_none(line: str) -> None:
    assert parse_line(line) is None


def test_non_finite_numbers_become_null_so_the_line_stays_strict_json() -> None:
    line = format_event(make_event("progress", loss=math.nan, grad_norm=math.inf, tokens_per_s=1.5))
    assert "NaN" not in line and "Infinity" not in line
    strict = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert strict["loss"] is None
    assert strict["grad_norm"] is None
    assert strict["tokens_per_s"] == 1.5


def test_unknown_event_names_are_refused_when_emitting() -> None:
    with pytest.raises(ValueError, match="unknown event"):
        make_event("finished")


def test_the_panel_can_import_the_parser_without_torch() -> None:
    code = (
        "import sys, training, training.protocol as p; "
        "assert p.parse_line('{\"event\": \"done\", \"v\": 1}')['event'] == 'done'; "
        "heavy = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
