"""The two tabs of the job submission form (the fine-tune preset, a custom image): the shared
pieces (engine/forms.py) and a job's own fields."""

from __future__ import annotations

from typing import Any

from django import forms

from controlpanel.engine.contract import MAX_TIMEOUT_S, field_of, part_of
from controlpanel.engine.durations import EXAMPLES
from controlpanel.engine.forms import ContainerForm, DurationField, WorkloadForm, numbered_lines
from controlpanel.engine.models import DEFAULT_TIMEOUT_S
from controlpanel.jobs.presets import DATA_PATH, MAIN_PARAMS, MODEL_PATH, OUTPUT_PATH
from controlpanel.queues.selectors import kueue_on


class _JobForm(WorkloadForm):
    timeout = DurationField(
        min_s=60,
        max_s=MAX_TIMEOUT_S,
        initial=DEFAULT_TIMEOUT_S,
        required=False,
        help_text=f"e.g. {EXAMPLES} (default 7d, at most 30d).",
    )
    nodes = forms.IntegerField(
        min_value=1,
        initial=1,
        required=False,
        label="Nodes",
        help_text="Pods of these units each, run together under torchrun (the CLI's --nodes N).",
    )

    preemptible = forms.BooleanField(
        required=False,
        label="Preemptible",
        help_text="May borrow other projects' idle GPUs and be preempted when they reclaim them; "
        "it then waits in the queue and resumes from its last checkpoint (the CLI's "
        "--preemptible).",
    )
    preemptible_default = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["preemptible"]
        field.initial = self.preemptible_default
        if not kueue_on():
            field.help_text = (
                "Borrowing and preemption need Kueue (QUEUE_ENGINE=kueue); this site's own queue "
                "neither borrows nor preempts, so the option changes nothing here."
            )

    def common_data(self) -> dict[str, Any]:
        data = self.cleaned_data
        return super().common_data() | {
            "timeout": data.get("timeout"),
            "nodes": data.get("nodes"),
            "preemptible": bool(data.get("preemptible")),
        }


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

    preemptible_default = True  # it saves a checkpoint on SIGTERM and resumes from it

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
