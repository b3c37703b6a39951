"""The sweep form: the fine-tune form, and three fields beyond it (the space, how to search,
and the limits)."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from controlpanel.jobs.forms import FinetuneForm

SEARCHES = [
    ("tpe:median", "TPE, stopping poor trials early (median rule)"),
    ("tpe:", "TPE"),
    ("random:median", "Random, stopping poor trials early (median rule)"),
    ("random:", "Random"),
    ("grid:median", "Every combination (grid), stopping poor trials early"),
    ("grid:", "Every combination (grid)"),
    ("tpe:successive_halving", "TPE, successive halving"),
]
_RANGE = re.compile(r"^(?P<low>\S+)\s*\.\.\s*(?P<high>\S+?)(?P<log>\s+log)?$")


def parse_space(text: str) -> dict[str, Any] | str:
    """`learning_rate = 1e-5, 1e-4` (values) or `learning_rate = 1e-5 .. 1e-3 log` (a range),
    one parameter a line; numbers as numbers, `data = b@GRA/v1, b@GRA/v2` as text."""
    space: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, rest = line.partition("=")
        if not sep or not name.strip() or not rest.strip():
            return f"Line {number}: write `name = value, value` or `name = low .. high [log]`."
        found = _RANGE.match(rest.strip())
        if found:
            low, high = _number(found["low"]), _number(found["high"])
            space[name.strip()] = {"low": low, "high": high, "log": bool(found["log"])}
        else:
            space[name.strip()] = {"values": [_number(v.strip()) for v in rest.split(",")]}
    return space or "Give at least one parameter to vary."


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


class SweepForm(FinetuneForm):
    space = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Search space",
        help_text="One parameter a line: `learning_rate = 1e-5, 1e-4, 1e-3` or "
        "`learning_rate = 1e-5 .. 1e-3 log`; also rank, alpha, epochs, max_steps, max_length, "
        "and data (dataset folders).",
    )
    search = forms.ChoiceField(choices=SEARCHES, label="Search")
    limits = forms.CharField(
        max_length=60,
        label="Trials / at once / max cost",
        initial="8 / 2",
        help_text="e.g. `8 / 2 / 5.00`: 8 trials, 2 at a time, launching stops at 5.00.",
    )

    def clean_space(self) -> dict[str, Any]:
        parsed = parse_space(self.cleaned_data["space"])
        if isinstance(parsed, str):
            raise forms.ValidationError(parsed)
        return parsed

    def clean_limits(self) -> dict[str, Any]:
        parts = [p.strip() for p in self.cleaned_data["limits"].split("/")]
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts[:2]):
            raise forms.ValidationError("Write trials / at once / max cost, e.g. 8 / 2 / 5.00.")
        limits: dict[str, Any] = {"max_trials": int(parts[0])}
        limits["parallel"] = int(parts[1]) if len(parts) > 1 else 1
        if len(parts) > 2 and parts[2]:
            limits["max_cost"] = parts[2]
        return limits

    def sweep_data(self) -> dict[str, Any]:
        """What validate_sweep takes: the fine-tune as the base, and the sweep's fields."""
        base = self.submission()
        flavor = base.get("flavor")
        base["flavor"] = getattr(flavor, "name", flavor)  # the API's spelling: JSON, stored
        sampler, pruner = self.cleaned_data["search"].split(":")
        return {
            "name": base.get("name"),
            "base": base,
            "space": self.cleaned_data["space"],
            "sampler": sampler,
            "pruner": pruner,
            **self.cleaned_data["limits"],
        }

    def widget_for(self, key: str) -> tuple[str | None, str]:
        """`space.rank` on the space field, `max_trials` on the limits, `base.x` as the job
        form places `x`."""
        if key.startswith("space"):
            return "space", ""
        if key in ("max_trials", "parallel", "max_cost"):
            return "limits", ""
        if key in ("sampler", "pruner"):
            return "search", ""
        return super().widget_for(key.removeprefix("base."))
