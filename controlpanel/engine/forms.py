"""The pieces every kind's form shares: a name, a flavor and its units (`WorkloadForm`), the
volumes, environment and labels of a container (`ContainerForm`), a duration field. Each form
hands its typed values to its kind's one validator (shared with the API and the CLI) and
places each of its keyed errors (contract.py) on the widget it concerns: `volumes.1` beside
the second volume."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.functional import lazy

from controlpanel.engine.contract import field_of, part_of
from controlpanel.engine.durations import EXAMPLES, DurationError, format_duration, parse_duration
from controlpanel.engine.machine_fit import machine_gpus, offer_note, unrunnable
from controlpanel.flavors.models import Flavor
from deploy.gpu_resources import mig_profile


def unit_of(flavor: Flavor) -> str:
    """What one unit of `flavor` is: `1× H100 80 GB, 30 vCPU, 380 GiB`."""
    cpu = f"{flavor.vcpu_per_unit} vCPU, {flavor.memory_gib_per_unit} GiB"
    if not flavor.is_gpu:
        return cpu
    profile = mig_profile(flavor.resource_key)
    if profile:  # a MIG slice: its memory is in the profile's name
        return f"{flavor.gpus_per_unit}× {flavor.gpu_model} MIG {profile}, {cpu}"
    return f"{flavor.gpus_per_unit}× {flavor.gpu_model} {flavor.gpu_memory_gib} GB, {cpu}"


class RunsHere:
    """Which enabled flavors can never run where this panel runs workloads, read once and
    only when a page asks (a form that is only validated reads nothing)."""

    def __init__(self) -> None:
        self._flavors: list[Flavor] | None = None
        self._unavailable: dict[str, str] | None = None

    def flavors(self) -> list[Flavor]:
        if self._flavors is None:
            self._flavors = list(Flavor.objects.filter(enabled=True))
        return self._flavors

    def unavailable(self) -> dict[str, str]:
        """name -> why it can never run here."""
        if self._unavailable is None:
            self._unavailable = unrunnable(self.flavors())
        return self._unavailable

    def note(self) -> str:
        return offer_note(machine_gpus() or ()) if self.unavailable() else ""

    def initial(self, asked: Any) -> Any:
        """The flavor the form starts on: the one asked for when it runs here, else the first
        that does."""
        if asked is not None and str(getattr(asked, "name", asked)) not in self.unavailable():
            return asked
        runs = [f.name for f in self.flavors() if f.name not in self.unavailable()]
        return runs[0] if runs else asked


class FlavorSelect(forms.Select):
    """A flavor select that shows the flavors which can never run here disabled, each with
    its reason as the option's title."""

    here: RunsHere | None = None

    def create_option(self, name: str, value: Any, label: Any, *args: Any, **kwargs: Any) -> Any:
        option = super().create_option(name, value, label, *args, **kwargs)
        reason = self.here.unavailable().get(str(value)) if self.here else None
        if reason:
            option["attrs"] = {**option["attrs"], "disabled": True, "title": reason}
            option["label"] = f"{label} (cannot run here)"
        return option


def offer_runnable(form: forms.Form) -> None:
    """Show the flavors that can never run here disabled, say why under the field, and start
    on one that runs (the validator still refuses one posted anyway)."""
    field = form.fields["flavor"]
    here = RunsHere()
    assert isinstance(field.widget, FlavorSelect)
    field.widget.here = here
    said = field.help_text
    field.help_text = lazy(lambda: here.note() or said, str)()
    asked = form.initial.get("flavor", field.initial)
    form.initial = {**form.initial, "flavor": lambda: here.initial(asked)}


class FlavorChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Flavor) -> str:
        price = obj.current_price
        return f"{obj.name} — {unit_of(obj)}" + (
            f" — {price:.2f}/h per unit" if price is not None else ""
        )


class DurationField(forms.CharField):
    """A duration typed as people write it (`30m`, `2h`, `7d`; a bare number is seconds),
    cleaned to seconds: the API's field."""

    def __init__(self, *, min_s: int, max_s: int, **kwargs: Any) -> None:
        self.min_s, self.max_s = min_s, max_s
        kwargs.setdefault("widget", forms.TextInput(attrs={"placeholder": EXAMPLES}))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, int) else value

    def to_python(self, value: Any) -> int | None:  # type: ignore[override]
        text = super().to_python(value)
        if not text:
            return None
        try:
            seconds = parse_duration(text)
        except DurationError as exc:
            raise ValidationError(str(exc), code="invalid") from exc
        if not self.min_s <= seconds <= self.max_s:
            raise ValidationError(
                f"Between {format_duration(self.min_s)} and {format_duration(self.max_s)} "
                f"(“{text}” is {format_duration(seconds)}).",
                code="range",
            )
        return seconds


def _pairs(text: str, field: str) -> dict[str, str]:
    """`KEY=value` lines into a dict; a line without `=` is an error naming the line."""
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValidationError(f"Line {number} of {field}: write KEY=value.")
        pairs[key.strip()] = value
    return pairs


class WorkloadForm(forms.Form):
    """What every workload form asks (a name, a flavor and its units) and how it shows the
    one validator's keyed errors: `volumes.1` beside the second line of the volumes."""

    # The non-empty lines of the text areas submitted, by field (set by `submission()`).
    lines: dict[str, list[tuple[int, str]]] = {}

    name = forms.CharField(max_length=100, required=False, help_text="Defaults to the image name.")
    flavor = FlavorChoiceField(
        queryset=Flavor.objects.filter(enabled=True),
        to_field_name="name",
        empty_label=None,
        widget=FlavorSelect,
    )
    gpu = forms.IntegerField(
        min_value=1, initial=1, label="Units", help_text="Units of the flavor (the CLI's --gpu N)."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offer_runnable(self)

    def describe_units(self, flavor: Flavor | None) -> None:
        """Say what a unit of the chosen flavor is: GPUs for a GPU flavor, vCPUs otherwise."""
        field = self.fields["gpu"]
        if flavor is None:
            return
        if flavor.is_gpu:
            each = f"{flavor.gpus_per_unit} GPU{'s' if flavor.gpus_per_unit != 1 else ''} each"
        else:
            each = f"{flavor.vcpu_per_unit} vCPU each"
        field.label = f"Units ({each})"
        field.help_text = f"One unit of {flavor.name}: {unit_of(flavor)}. The CLI's --gpu N."
        # A bound field copies the label when made: forget one made before this call.
        self._bound_fields_cache.pop("gpu", None)  # type: ignore[attr-defined]

    def common_data(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data.get("name") or "",
            "flavor": data.get("flavor"),
            "gpu": data.get("gpu"),
        }

    def forget_missing(self) -> None:
        """While the form is still being filled in (live validation), an empty required field
        is not an error yet: only what was typed is judged."""
        for name, errors in list(self.errors.as_data().items()):
            if name in self.fields and all(e.code == "required" for e in errors):
                del self.errors[name]

    def place_errors(self, error: ValidationError) -> None:
        """Put each of the validator's keyed errors beside the widget it concerns (or above
        the form when no widget holds it), unless the form already says what is wrong there."""
        said = set(self.errors)
        for key, messages in error.message_dict.items():
            target, prefix = self.widget_for(key)
            if target in said:
                continue
            for message in messages:
                self.add_error(target, prefix + message)

    def widget_for(self, key: str) -> tuple[str | None, str]:
        """The field showing error `key`, and what to say before its message: `volumes.2`
        and `command.2` are lines of their text areas, so say which."""
        name, part = field_of(key), part_of(key)
        if name in self.lines and part.isdigit() and int(part) < len(self.lines[name]):
            return name, f"Line {self.lines[name][int(part)][0]}: "
        return (name if name in self.fields else None), ""


def numbered_lines(text: str, *, strip: bool) -> list[tuple[int, str]]:
    """The non-empty lines of a text area with their numbers (from 1); volumes are stripped."""
    lines = [(n, line.strip() if strip else line) for n, line in enumerate(text.splitlines(), 1)]
    return [(n, line) for n, line in lines if line]


class ContainerForm(WorkloadForm):
    """Volumes (one spec a line, with the bucket picker), environment and labels: what a
    custom job and a notebook both ask."""

    volumes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="One spec per line: bucket@ALIAS[/prefix]:/workspace/path[:ro|rw|rwd].",
    )
    env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Environment",
        help_text="KEY=value, one per line; KEY=secret:NAME reads the project's secret NAME.",
    )
    labels = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        help_text="key=value, one per line.",
    )

    def container_data(self) -> dict[str, Any]:
        """Volumes, env and labels as the validators take them (the volumes' lines noted)."""
        data = self.cleaned_data
        self.lines = self.lines | {"volumes": numbered_lines(data.get("volumes") or "", strip=True)}
        return {
            "volumes": [text for _, text in self.lines["volumes"]],
            "env": _pairs(data.get("env") or "", "Environment"),
            "labels": {
                k.strip(): v.strip() for k, v in _pairs(data.get("labels") or "", "labels").items()
            },
        }

    def clean_env(self) -> str:
        _pairs(self.cleaned_data.get("env") or "", "Environment")
        return self.cleaned_data.get("env") or ""

    def clean_labels(self) -> str:
        _pairs(self.cleaned_data.get("labels") or "", "labels")
        return self.cleaned_data.get("labels") or ""
