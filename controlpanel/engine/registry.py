"""The kind registry: what each workload kind declares once for the engine (`KindSpec`), found
through controlpanel/kinds.py (healthchecks' TRANSPORTS, DESIGN.md rule 16). The engine,
billing, dashboards, the people pages and the CLI ask `kind_of(workload)` or loop over
`kinds()`; only the kinds' own packages name a kind.

A spec is plain data (its states, the words of its writes, how its objects live) plus, by
dotted path, the parts that import the engine (its proxy model, its driver, its periodic
chores): those are imported on first use, so the engine reads every spec while its own models
load, and no engine module imports a kind."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.db.models import TextChoices
from django.utils.module_loading import import_string

from controlpanel.kinds import KINDS

if TYPE_CHECKING:  # the driver imports the engine: only for the type
    from controlpanel.engine.driver import Driver


@dataclass(frozen=True)
class KindSpec:
    """What the engine needs of one kind. `name` is the `kind` column's value, deploy's
    WorkloadKind and the `ajuste.io/kind` label, and the noun of its routes (`<name>-detail`
    with `<name>_id`) and of its services' keyword (`job=`, `notebook=`, `app=`).

    The defaults are a kind that runs until it is stopped (started again at will, FAILED and
    ERROR its failures); a kind says only where it differs."""

    name: str
    states: type[TextChoices]
    final: frozenset[str]  # its runs end in these (no state name is live for another kind)
    waiting: str  # where it waits for admission (admitted_at None)
    # Where each state lies within one run: an observation that leads below the row's state is
    # older than what was recorded, and is ignored (lifecycle.is_behind).
    ranks: Mapping[str, int]
    printing: frozenset[str]  # its process may print: the log collector reads it
    stoppable: frozenset[str]  # a stop is taken in these (services.py)
    model_path: str  # its proxy model, by dotted path
    driver_path: str  # its Driver (driver.py), by dotted path
    label: str = ""  # default: the name, capitalized
    plural: str = ""  # default: name + "s"
    running: str = "RUNNING"  # its process runs (serves)
    failed: str = "FAILED"  # a launch refused (a bucket or a secret gone) ends the run here
    error: str = "ERROR"  # a platform fault, from any state
    failures: frozenset[str] = frozenset()  # final states that are failures; default both above
    # Its writes (services.py): from which states, to which, in which words (`.format` gets
    # name, state, run and user).
    startable: frozenset[str] = frozenset()  # default: its final states
    start_reason: str = "started by {user}"
    start_refusal: str = "The {name} is {state}: stop it first."
    stopping: str = "STOPPING"
    stopped: str = "STOPPED"  # a stop before the backend was ever asked ends here
    stop_reason: str = "stopped by {user}"  # when the stop says no reason of its own
    stop_refusal: str = "The {name} is {state}: there is nothing to stop."
    deletable: frozenset[str] | None = None  # None: in any state
    delete_refusal: str = ""
    # Its objects keep one name across runs (the same address, the same workspace): the
    # backend knows one run of it, and a delete removes them (DELETING) before the row.
    one_name: bool = False
    # A run with rw volumes claims a workspace (the storage quota) from its admission until it
    # ends in `claim_released`; `claim_kept` ends keep it (data to push again, or to rescue).
    run_claim: bool = False
    claim_kept: frozenset[str] = frozenset()
    claim_released: frozenset[str] = frozenset()
    progress_events: bool = False  # its log carries the fine-tune protocol's events
    judged_by_ends: bool = False  # the dashboards' success rate and final-state chart
    idle_deadline: str = ""  # when a running one stops for idleness (dashboards), by path
    # What the GPU idle policy does once its grace is over (controlpanel/reclaim): "stop",
    # "warn" (only), or "choice" (the project's gpu_idle_jobs says which).
    gpu_idle: str = "warn"
    # Run after every sweep by the task layer: what each counts, and its function by path.
    chores: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        derived = {
            "label": self.label or self.name.capitalize(),
            "plural": self.plural or f"{self.name}s",
            "failures": self.failures or frozenset({self.failed, self.error}),
            "startable": self.startable or self.final,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)  # frozen: the defaults that derive

    def said(self, text: str, **words: Any) -> str:
        """One of its sentences (a refusal, a reason) with its words filled in."""
        return text.format(name=self.name, **words)

    @property
    def model(self) -> Any:
        return load(self.model_path)

    @property
    def driver(self) -> Driver:
        driver: Driver = load(self.driver_path)
        return driver

    def chore_calls(self) -> dict[str, Callable[[], int]]:
        return {count: load(path) for count, path in self.chores.items()}

    def idle_deadline_of(self) -> Callable[[Any], Any] | None:
        return load(self.idle_deadline) if self.idle_deadline else None


def server_kind(*, states: type[TextChoices], ranks: Mapping[str, int], **fields: Any) -> KindSpec:
    """A kind that serves until it is stopped (notebooks, apps): its runs end STOPPED, FAILED
    or ERROR, ranked after every live state, and its objects keep one name across runs."""
    final = frozenset({states("STOPPED"), states("FAILED"), states("ERROR")})
    ended = max(ranks.values()) + 1
    ranked: dict[str, int] = {**ranks, **dict.fromkeys(final, ended)}
    return KindSpec(states=states, final=final, ranks=ranked, one_name=True, **fields)


@functools.cache
def load(path: str) -> Any:
    """What a dotted path names, imported once."""
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


def package_of(spec: KindSpec) -> str:
    """The kind's package (`<package>.urls`, `<package>.cli`, ...)."""
    return KINDS[spec.name]


def states_of(pick: Callable[[KindSpec], Any]) -> frozenset[str]:
    """Every kind's states of one sort: `states_of(lambda k: k.final)`, or a single state
    (`lambda k: k.waiting`)."""
    found: set[str] = set()
    for spec in kinds():
        picked = pick(spec)
        found |= {picked} if isinstance(picked, str) else set(picked)
    return frozenset(found)
