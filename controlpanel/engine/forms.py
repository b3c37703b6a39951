"""The two tabs of the job submission form, and the pieces the notebook form shares with them
(notebook_forms.py). Each hands its typed values to the one validator (validation.validate_job,
shared with the API and the CLI) and places each of its keyed errors (contract.py) on the
widget it concerns: `volumes.1` beside the second volume."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from controlpanel.engine.contract import MAX_TIMEOUT_S, field_of, part_of
from controlpanel.engine.durations import (
    EXAMPLES,
    DurationError,
    format_duration,
    parse_duration,
)
from controlpanel.engine.models import DEFAULT_TIMEOUT_S
from controlpanel.engine.presets import DATA_PATH, MAIN_PARAMS, MODEL_PATH, OUTPUT_PATH
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
        queryset=Flavor.objects.filter(enabled=True), to_field_name="name", empty_label=None
    )
    gpu = forms.IntegerField(
        min_value=1, initial=1, label="Units", help_text="Units of the flavor (the CLI's --gpu N)."
    )

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


class _JobForm(WorkloadForm):
    timeout = DurationField(
        min_s=60,
        max_s=MAX_TIMEOUT_S,
        initial=DEFAULT_TIMEOUT_S,
        required=False,
        help_text=f"e.g. {EXAMPLES} (default 7d, at most 30d).",
    )

    def common_data(self) -> dict[str, Any]:
        return super().common_data() | {"timeout": self.cleaned_data.get("timeout")}


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


class CustomJobForm(ContainerForm, _JobForm):
    image = forms.CharField(max_length=300, help_text="e.g. my-registry/my-training-image:latest")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="One argument per line (never run through a shell).",
    )

    def submission(self) -> dict[str, Any]:
        """The typed values, as the validator takes them."""
        data = self.cleaned_data
        self.lines = {"command": numbered_lines(data.get("command") or "", strip=False)}
        return (
            self.common_data()
            | {"image": data.get("image"), "command": [text for _, text in self.lines["command"]]}
            | self.container_data()
        )


class FinetuneForm(_JobForm):
    """The fine-tune preset: where the model, the dataset and the output live, and the main
    hyper-parameters with the entry point's defaults."""

    base_model = forms.CharField(
        max_length=200,
        required=False,
        label="Base model (hub id)",
        help_text="e.g. mistralai/Mistral-7B-v0.3 — or leave empty and give a model volume.",
    )
    model_volume = forms.CharField(
        max_length=300,
        required=False,
        label="Base model from a bucket",
        help_text=f"bucket@ALIAS/prefix (mounted read-only at {MODEL_PATH}).",
    )
    data_volume = forms.CharField(
        max_length=300,
        label="Dataset",
        help_text=f"bucket@ALIAS/prefix of JSONL files ({DATA_PATH}).",
    )
    output_volume = forms.CharField(
        max_length=300,
        label="Output",
        help_text=f"bucket@ALIAS/prefix for the adapter ({OUTPUT_PATH}).",
    )
    method = forms.ChoiceField(choices=[("lora", "LoRA"), ("qlora", "QLoRA (4-bit, GPU)")])
    rank = forms.IntegerField(min_value=1, max_value=1024)
    alpha = forms.IntegerField(min_value=1)
    learning_rate = forms.FloatField(min_value=0.0)
    epochs = forms.FloatField(min_value=0.0, required=False)
    max_steps = forms.IntegerField(required=False, help_text="Overrides epochs when > 0.")
    batch_size = forms.IntegerField(min_value=1)
    grad_accum = forms.IntegerField(min_value=1, label="Gradient accumulation")
    max_length = forms.IntegerField(min_value=16, max_value=131072)

    volume_fields: list[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["initial"] = MAIN_PARAMS | (kwargs.get("initial") or {})
        super().__init__(*args, **kwargs)

    def submission(self) -> dict[str, Any]:
        """The typed values, as the validator takes them: the preset's params and the three
        volume fields as specs mounted where the preset reads and writes."""
        data = self.cleaned_data
        params = {name: data[name] for name in MAIN_PARAMS if data.get(name) not in (None, "")}
        if data.get("base_model"):
            params["base_model"] = data["base_model"].strip()
        mounts = [
            ("model_volume", f"{MODEL_PATH}:ro"),
            ("data_volume", f"{DATA_PATH}:ro"),
            ("output_volume", f"{OUTPUT_PATH}:rw"),
        ]
        given = [
            (name, mount) for name, mount in mounts if name != "model_volume" or data.get(name)
        ]
        self.volume_fields = [name for name, _ in given]
        volumes = [f"{(data.get(name) or '').strip()}:{mount}" for name, mount in given]
        return self.common_data() | {"preset": "finetune", "params": params, "volumes": volumes}

    def widget_for(self, key: str) -> tuple[str | None, str]:
        """`volumes.0` is the first volume field given; `params.rank` the rank field."""
        name, part = field_of(key), part_of(key)
        if name == "volumes" and part.isdigit() and int(part) < len(self.volume_fields):
            return self.volume_fields[int(part)], ""
        if name == "volumes":
            return "data_volume", ""  # what the preset needs of its volumes
        if name == "params" and part in self.fields:
            return part, ""
        return super().widget_for(key)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("data_volume", "output_volume", "model_volume"):
            if ":" in (data.get(name) or ""):
                self.add_error(name, "Give only bucket@ALIAS/prefix; the mount path is set.")
        return data
