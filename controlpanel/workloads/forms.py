"""The two tabs of the submission form. Each turns its fields into the API's job data, so the
form, the API and the CLI share one validation (validation.clean_job)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from controlpanel.flavors.models import Flavor
from controlpanel.workloads.durations import (
    EXAMPLES,
    DurationError,
    format_duration,
    parse_duration,
)
from controlpanel.workloads.models import DEFAULT_TIMEOUT_S
from controlpanel.workloads.presets import DATA_PATH, MAIN_PARAMS, MODEL_PATH, OUTPUT_PATH
from controlpanel.workloads.validation import MAX_TIMEOUT_S


def unit_of(flavor: Flavor) -> str:
    """What one unit of `flavor` is: `1× H100 80 GB, 30 vCPU, 380 GiB`."""
    cpu = f"{flavor.vcpu_per_unit} vCPU, {flavor.memory_gib_per_unit} GiB"
    if not flavor.is_gpu:
        return cpu
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


class _JobForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="Defaults to the image name.")
    flavor = FlavorChoiceField(
        queryset=Flavor.objects.filter(enabled=True), to_field_name="name", empty_label=None
    )
    gpu = forms.IntegerField(
        min_value=1, initial=1, label="Units", help_text="Units of the flavor (the CLI's --gpu N)."
    )
    timeout = DurationField(
        min_s=60,
        max_s=MAX_TIMEOUT_S,
        initial=DEFAULT_TIMEOUT_S,
        required=False,
        help_text=f"e.g. {EXAMPLES} (default 7d, at most 30d).",
    )
    field_map: dict[str, str] = {}

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
        flavor = data.get("flavor")
        return {
            "name": data.get("name") or "",
            "flavor": flavor.name if flavor else None,
            "gpu": data.get("gpu"),
            "timeout": data.get("timeout"),
        }

    def forget_missing(self) -> None:
        """While the form is still being filled in (live validation), an empty required field
        is not an error yet: only what was typed is judged."""
        for name, errors in list(self.errors.as_data().items()):
            if name in self.fields and all(e.code == "required" for e in errors):
                del self.errors[name]

    def add_service_errors(self, error: ValidationError) -> None:
        """Show each API-level error beside the form field it concerns."""
        for key, messages in error.message_dict.items():
            name = self.field_map.get(key, key)
            target = name if name in self.fields else None
            if target and target in self.errors:
                continue  # the form already says what is wrong with this field
            for message in messages:
                self.add_error(target, message)


class CustomJobForm(_JobForm):
    image = forms.CharField(max_length=300, help_text="e.g. my-registry/my-training-image:latest")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="One argument per line (never run through a shell).",
    )
    volumes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="One spec per line: bucket@ALIAS[/prefix]:/workspace/path[:ro|rw|rwd].",
    )
    env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Environment",
        help_text="KEY=value, one per line.",
    )
    labels = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        help_text="key=value, one per line.",
    )

    def to_job_data(self) -> dict[str, Any]:
        data = self.cleaned_data
        return self.common_data() | {
            "image": data.get("image"),
            "command": [line for line in (data.get("command") or "").splitlines() if line],
            "volumes": [v.strip() for v in (data.get("volumes") or "").splitlines() if v.strip()],
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["initial"] = MAIN_PARAMS | (kwargs.get("initial") or {})
        super().__init__(*args, **kwargs)

    def to_job_data(self) -> dict[str, Any]:
        data = self.cleaned_data
        params = {name: data[name] for name in MAIN_PARAMS if data.get(name) not in (None, "")}
        if data.get("base_model"):
            params["base_model"] = data["base_model"].strip()
        volumes = [
            f"{(data.get('data_volume') or '').strip()}:{DATA_PATH}:ro",
            f"{(data.get('output_volume') or '').strip()}:{OUTPUT_PATH}:rw",
        ]
        if data.get("model_volume"):
            volumes.insert(0, f"{data['model_volume'].strip()}:{MODEL_PATH}:ro")
        return self.common_data() | {"preset": "finetune", "params": params, "volumes": volumes}

    def add_service_errors(self, error: ValidationError) -> None:
        """A volume's problem goes beside its own field (the message quotes its mount path)."""
        fields = {
            MODEL_PATH: "model_volume",
            DATA_PATH: "data_volume",
            OUTPUT_PATH: "output_volume",
        }
        others = {k: v for k, v in error.message_dict.items() if k != "volumes"}
        said = set(self.errors)  # what the form itself found wrong already
        for message in error.message_dict.get("volumes", []):
            name = next((f for path, f in fields.items() if f":{path}" in message), "data_volume")
            if name not in said:
                self.add_error(name, message)
        if others:
            super().add_service_errors(ValidationError(others))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("data_volume", "output_volume", "model_volume"):
            if ":" in (data.get(name) or ""):
                self.add_error(name, "Give only bucket@ALIAS/prefix; the mount path is set.")
        return data
