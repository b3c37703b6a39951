"""The kind registry: what each workload kind declares once for the engine (`KindSpec`), found
through controlpanel/kinds.py. The engine asks `kind_of(workload)` and never names a kind.

A spec is plain data (states, the words of its writes, how its objects live) plus, by dotted
path, the parts that import the engine (its proxy model, its driver): those are imported on
first use, so the engine can read every kind's spec while its own models load."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from django.db.models import TextChoices
from django.utils.module_loading import import_string

from controlpanel.kinds import KINDS


@dataclass(frozen=True)
class KindSpec:
    """What the engine needs of one kind. `name` is the `kind` column's value, deploy's
    WorkloadKind and the `ajuste.io/kind` label, and the noun of its routes (`<name>-detail`
    with `<name>_id`) and of its services' keyword (`job=`, `notebook=`, `app=`)."""

    name: str
    label: str
    plural: str
    states: type[TextChoices]
    final: frozenset[str]  # a run ends in these (none is live for another kind)
    waiting: str  # where it waits for admission (admitted_at None)
    failed: str  # a launch refused (a bucket or secret gone) ends the run here
    # Its writes (controlpanel/engine/services.py): from which states, to which, in which words.
    startable: frozenset[str]
    start_reason: str  # .format(run=, user=)
    start_refusal: str  # .format(state=)
    stoppable: frozenset[str]
    stopping: str
    stopped: str  # a stop before the backend was ever asked ends here
    stop_reason: str  # .format(user=), when the stop gives none
    stop_refusal: str  # .format(state=)
    deletable: frozenset[str] | None = None  # None: in any state
    delete_refusal: str = ""
    # Its objects keep one name across runs (the same address, the same workspace): the
    # backend knows one run of it, and a delete removes them (DELETING) before the row.
    one_name: bool = False
    model: str = ""  # its proxy model, by dotted path
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def model_class(self) -> Any:
        return _load(self.model)


@functools.cache
def _load(path: str) -> Any:
    return import_string(path)


@functools.cache
def _specs() -> dict[str, KindSpec]:
    """Every kind's spec, in the order of controlpanel/kinds.py."""
    specs = {name: import_module(f"{package}.kind").KIND for name, package in KINDS.items()}
    for name, spec in specs.items():
        if spec.name != name:
            raise ValueError(f"controlpanel/kinds.py names {name!r}, its kind.py {spec.name!r}")
    return specs


def kinds() -> Iterator[KindSpec]:
    return iter(_specs().values())


def kind_of(workload_or_name: Any) -> KindSpec:
    """The spec of a workload (or of a kind's name)."""
    name = getattr(workload_or_name, "kind", workload_or_name)
    return _specs()[str(name)]
