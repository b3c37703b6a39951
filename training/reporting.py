"""Where events go: stdout (the job log the panel parses), metrics.jsonl and status.json."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from training.protocol import format_event, format_log, make_event

STATES = {"done": "done", "error": "failed", "interrupted": "interrupted"}


class Reporter:
    """Emits protocol events; silent on ranks other than the writer (one stream per job, not
    per GPU)."""

    def __init__(
        self, output: Path | None, enabled: bool = True, stream: TextIO | None = None
    ) -> None:
        self.output = output
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.max_steps = 0
        self.step: int | None = None

    def log(self, message: str) -> None:
        if self.enabled:
            print(format_log(message), file=self.stream, flush=True)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        obj = make_event(event, **fields)
        if not self.enabled:
            return obj
        print(format_event(obj), file=self.stream, flush=True)
        if self.output is not None:
            self._record(obj)
        return obj

    def _record(self, obj: dict[str, Any]) -> None:
        self.output.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        if obj["event"] in ("progress", "eval"):
            with (self.output / "metrics.jsonl").open("a", encoding="utf-8") as fh:  # type: ignore[operator]
                fh.write(format_event(obj) + "\n")
        if obj["event"] == "start":
            self.max_steps = obj["max_steps"]
            self.step = obj["resumed_from_step"]
        self.step = obj.get("step", self.step)
        if obj["event"] == "error":
            state = "interrupted" if obj["kind"] == "interrupted" else "failed"
        else:
            state = STATES.get(obj["event"], "running")
        self._status(state, obj)

    def _status(self, state: str, last: dict[str, Any]) -> None:
        """status.json, replaced atomically so a reader never sees half a file."""
        status = {
            "state": state,
            "step": self.step,
            "max_steps": self.max_steps or None,
            "updated": last["time"],
            "last_event": last,
        }
        path = self.output / "status.json"  # type: ignore[operator]
        tmp = path.with_name(".status.json.tmp")
        tmp.write_text(json.dumps(status, indent=1, allow_nan=False))
        os.replace(tmp, path)


def rewind_metrics(output: Path, step: int) -> None:
    """Forget metrics logged after `step`: a resumed run redoes those steps."""
    path = output / "metrics.jsonl"
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                kept.append(line)
        except ValueError:
            continue  # a line cut short by the kill
    path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
