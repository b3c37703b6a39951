"""What a reader keeps of a fine-tune run: the newest known state (`Snapshot`), merged from the
events `training/protocol.py` defines. Standard library only, like the protocol, so the panel
reads it without torch."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from training.protocol import _DROP, FIELDS, FieldKind, _field, loss_point, read_event

# What a reader keeps of a run: these events' fields, the newest over the older.
SNAPSHOT_EVENTS = ("start", "progress", "done", "error")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The newest known state of a fine-tune run (None: not reported, or not a finite number).

    `event` is the last kept event's name (`last_event` in the stored JSON too, which older
    readers use)."""

    event: str | None = None
    v: int | None = None
    time: float | None = None
    # start
    model: str | None = None
    method: str | None = None
    device: str | None = None
    dtype: str | None = None
    world_size: int | None = None
    nodes: int | None = None
    parallel: str | None = None
    epochs: float | None = None
    resumed_from_step: int | None = None
    train_examples: int | None = None
    eval_examples: int | None = None
    train_tokens: int | None = None
    trainable_params: int | None = None
    total_params: int | None = None
    # progress
    step: int | None = None
    max_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    tokens_seen: int | None = None
    tokens_per_s: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    gpu_mem_gb: float | None = None
    # done
    train_loss: float | None = None
    adapter_path: str | None = None
    merged_path: str | None = None
    # error
    kind: str | None = None
    message: str | None = None
    exit_code: int | None = None
    errors: list[dict[str, Any]] | None = None
    rank: int | None = None

    def merge(self, event: Mapping[str, Any] | None) -> Snapshot:
        """This snapshot with a checked event's fields over it (other events change nothing)."""
        if not event or event.get("event") not in SNAPSHOT_EVENTS:
            return self
        return dataclasses.replace(self, **{k: v for k, v in event.items() if k in _SNAPSHOT})

    def merge_lines(self, lines: Iterable[str]) -> Snapshot:
        snapshot = self
        for line in lines:
            snapshot = snapshot.merge(read_event(line))
        return snapshot

    @classmethod
    def from_json(cls, stored: Any) -> Snapshot:
        """A stored snapshot, every field checked again (a row may predate a rule); never
        raises."""
        if not isinstance(stored, dict):
            return cls()
        event = stored.get("last_event", stored.get("event"))
        fields = {k: v for k, v in stored.items() if k in _SNAPSHOT_KINDS}
        checked = {k: _field(_SNAPSHOT_KINDS[k], v) for k, v in fields.items()}
        kept = {k: v for k, v in checked.items() if v is not _DROP}
        return cls(event=event if event in SNAPSHOT_EVENTS else None, **kept)

    def to_json(self) -> dict[str, Any]:
        """The known fields (strict JSON); `{}` for a run that reported nothing."""
        known = {k: v for k in _SNAPSHOT_ORDER if (v := getattr(self, k)) is not None}
        if self.errors is not None:  # a copy: the snapshot is frozen, its answer is the caller's
            known["errors"] = [dict(error) for error in self.errors]
        if self.event is not None:
            known["last_event"] = self.event
        return known

    def __bool__(self) -> bool:
        """Whether the run reported anything (a row written by hand may lack `event`)."""
        return any(getattr(self, k) is not None for k in _SNAPSHOT_ORDER)

    @property
    def percent(self) -> int:
        """How far the steps went, 0 to 100; 0 without usable numbers."""
        if self.step is None or not self.max_steps or self.max_steps < 0:
            return 0
        return int(min(max(100 * self.step / self.max_steps, 0), 100))


_SNAPSHOT_KINDS: dict[str, FieldKind] = {
    name: kind for event in SNAPSHOT_EVENTS for name, kind in FIELDS[event].items()
}
# The fields in their order (dataclasses.asdict deep-copies every value: 3 ms of a 50-job list).
_SNAPSHOT_ORDER = tuple(f.name for f in dataclasses.fields(Snapshot))
_SNAPSHOT = frozenset(_SNAPSHOT_ORDER)


def curve_point(event: Mapping[str, Any] | None) -> list[Any] | None:
    """[step, loss, tokens_per_s, learning_rate] of a checked `progress` event that carries a
    step and a loss (the last two None when absent): one point of a run's training curve."""
    point = loss_point(event)
    if point is None or event is None:
        return None
    return [*point, event.get("tokens_per_s"), event.get("learning_rate")]
