"""The progress protocol the panel parses: strict JSON events, never confused with log lines."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.llm import REPO
from training.protocol import (
    EVENTS,
    FIELDS,
    format_event,
    format_log,
    is_event,
    loss_point,
    make_event,
    parse_line,
    read_event,
)
from training.snapshot import SNAPSHOT_EVENTS, Snapshot


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


# The reader's side: any job can print lines that look like events.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and ±Infinity included
    | st.text()
    | st.sampled_from(["nul \x00", "lone \ud800", "x" * 3000]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(sorted({f for fields in FIELDS.values() for f in fields}))


@settings(max_examples=300, deadline=None)
@given(
    event=st.sampled_from(EVENTS),
    fields=st.dictionaries(field_names | st.text(max_size=5), json_values, max_size=12),
)
def test_sanitize_never_raises_and_leaves_strict_json_of_the_declared_types(
    event: str, fields: dict[str, Any]
) -> None:
    line = json.dumps({**fields, "event": event})  # Python writes NaN and Infinity too
    clean = read_event(line)
    assert clean is not None and clean["event"] == event
    json.dumps(clean, allow_nan=False)  # strict JSON: no NaN or Infinity left
    for name, value in clean.items():
        if name == "event" or value is None:
            continue
        kind = FIELDS[event][name]  # only the event's declared fields are kept
        expected = {"int": int, "float": float, "text": str, "errors": list}[kind]
        assert type(value) is expected, (name, value)
        assert "\x00" not in json.dumps(value, ensure_ascii=False)
    snapshot = Snapshot().merge(clean)
    assert Snapshot.from_json(snapshot.to_json()) == snapshot  # what is stored reads back


def test_fields_come_from_the_event_shapes_and_the_snapshot_holds_them_all() -> None:
    assert FIELDS["progress"]["step"] == "int" and FIELDS["progress"]["loss"] == "float"
    assert FIELDS["error"]["kind"] == "text" and FIELDS["error"]["errors"] == "errors"
    assert "path" in FIELDS["checkpoint"] and "path" not in FIELDS["done"]
    kept = {name for event in SNAPSHOT_EVENTS for name in FIELDS[event]}
    assert kept <= {f.name for f in dataclasses.fields(Snapshot)}


def test_a_line_nested_too_deeply_for_the_parser_is_a_human_line() -> None:
    deep = '{"event":"progress","x":' + "[" * 100_000 + "]" * 100_000 + "}"
    assert parse_line(deep) is None and read_event(deep) is None and not is_event(deep)


def test_snapshot_merges_the_newest_fields_and_reads_bad_stored_values_safely() -> None:
    lines = [
        format_event(make_event("start", model="/workspace/model", max_steps=10)),
        format_event(make_event("progress", step=4, max_steps=10, loss=1.5)),
        format_event(make_event("eval", step=4, eval_loss=1.0)),  # not kept
        format_event(make_event("progress", step=5, max_steps=10, loss=math.nan)),
    ]
    snapshot = Snapshot().merge_lines(lines)
    assert (snapshot.event, snapshot.step, snapshot.loss, snapshot.percent) == (
        "progress",
        5,
        None,
        50,
    )
    assert snapshot.model == "/workspace/model"
    stored = snapshot.to_json()
    assert stored["last_event"] == stored["event"] == "progress" and "loss" not in stored
    bad = {"last_event": "progress", "step": "5", "max_steps": 1e400, "message": 7, "x": 1}
    assert Snapshot.from_json(bad) == Snapshot(event="progress")
    assert Snapshot.from_json(None) == Snapshot.from_json([1]) == Snapshot()
    assert not Snapshot() and Snapshot.from_json({"step": 1})  # reported something, or not
    assert (
        Snapshot(step=3, max_steps=0).percent == 0
        and Snapshot(step=30, max_steps=10).percent == 100
    )
    assert loss_point(read_event(lines[1])) == (4, 1.5) and loss_point(read_event(lines[3])) is None


def test_an_eviction_and_the_resume_are_events_of_their_own_that_the_snapshot_leaves_alone(
    tmp_path: Any,
) -> None:
    """The panel's history reads "evicted at step N -> resumed from step N" from these two;
    older readers, which keep a Snapshot, see the `error` (kind interrupted) and `start` they
    always saw."""
    from training.reporting import Reporter

    interrupted = make_event(
        "interrupted", step=412, checkpoint="/o/checkpoints/step-000412", signal="SIGTERM"
    )
    resumed = make_event("resumed", step=412, checkpoint="/o/checkpoints/step-000412")
    assert FIELDS["interrupted"] == {
        "v": "int", "time": "float", "step": "int", "checkpoint": "text", "signal": "text",
    }  # fmt: skip
    assert read_event(format_event(resumed)) == {
        k: v for k, v in resumed.items() if k in FIELDS["resumed"] or k == "event"
    }
    assert "interrupted" not in SNAPSHOT_EVENTS and "resumed" not in SNAPSHOT_EVENTS
    progress = Snapshot().merge(read_event(format_event(make_event("progress", step=400))))
    assert progress.merge(read_event(format_event(interrupted))) == progress
    start = make_event("start", world_size=8, nodes=2, parallel="fsdp", resumed_from_step=412)
    snapshot = Snapshot().merge(read_event(format_event(start)))
    assert (snapshot.nodes, snapshot.parallel, snapshot.resumed_from_step) == (2, "fsdp", 412)

    with open(tmp_path / "log", "w", encoding="utf-8") as log:
        fields = {k: interrupted[k] for k in ("step", "checkpoint", "signal")}
        Reporter(tmp_path, stream=log).emit("interrupted", **fields)
    status = json.loads((tmp_path / "status.json").read_text())
    assert (status["state"], status["step"]) == ("interrupted", 412)
