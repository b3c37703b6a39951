"""The notebook form: the job form's pieces (name, flavor × units, volumes with the bucket
picker, env, labels; errors placed by key) plus an image from the admin's list and the editor
it serves. An editor the chosen image does not serve, or that this panel cannot serve, is
offered disabled with the reason beside it, so nobody learns it only after submitting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.http import QueryDict

from controlpanel.engine.forms import ContainerForm
from controlpanel.notebooks.models import NotebookImage
from controlpanel.notebooks.validation import editor_unavailable
from deploy.types import Editor

EDITOR_LABELS: dict[str, str] = {Editor.JUPYTERLAB: "JupyterLab", Editor.VSCODE: "VS Code"}


def editors_label(image: NotebookImage) -> str:
    """`JupyterLab and VS Code`: the editors an image serves, as people name them."""
    return " and ".join(EDITOR_LABELS.get(e, str(e)) for e in image.editors) or "no editor"


def _usable(image: NotebookImage, editor: str) -> bool:
    return editor in image.editors and not editor_unavailable(editor)


class ImageChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: NotebookImage) -> str:
        return f"{obj.label} — {editors_label(obj)}"


@dataclass(frozen=True)
class EditorOption:
    """One radio of the editor picker: `reason` says why it is disabled ('' when it is not)."""

    value: str
    label: str
    checked: bool
    reason: str


class NotebookForm(ContainerForm):
    name = forms.CharField(max_length=100, required=False, help_text="Defaults to “notebook”.")
    image = ImageChoiceField(
        queryset=NotebookImage.objects.filter(enabled=True),
        to_field_name="name",
        empty_label=None,
        help_text="Framework images kept by the site's administrators.",
    )
    editor = forms.ChoiceField(
        choices=[(e.value, EDITOR_LABELS[e]) for e in Editor],
        widget=forms.RadioSelect,
        initial=Editor.JUPYTERLAB.value,
    )

    @staticmethod
    def with_usable_editor(data: QueryDict) -> QueryDict:
        """While the form is being filled in, choosing an image that does not serve the chosen
        editor moves the choice to one it serves (the code-server image: VS Code)."""
        image = NotebookImage.objects.filter(name=data.get("image") or "", enabled=True).first()
        if image is None or _usable(image, data.get("editor") or ""):
            return data
        usable = next((e for e in image.editors if _usable(image, e)), None)
        if usable is None:
            return data  # nothing better: the picker says why
        data = data.copy()
        data["editor"] = usable
        return data

    def submission(self) -> dict[str, Any]:
        """The typed values, as `validate_notebook` takes them."""
        data = self.cleaned_data
        return (
            self.common_data()
            | {"image": data.get("image"), "editor": data.get("editor")}
            | self.container_data()
        )

    def chosen_image(self) -> NotebookImage | None:
        """The image the form shows chosen: what was posted, else the first of the list."""
        if self.is_bound:
            return self.cleaned_data.get("image") if hasattr(self, "cleaned_data") else None
        images = self.fields["image"].queryset  # type: ignore[attr-defined]
        return images.filter(name=self["image"].value()).first() or images.first()

    def editor_options(self) -> list[EditorOption]:
        """The editor picker, judged against the chosen image and this panel."""
        image = self.chosen_image()
        chosen = str(self["editor"].value() or "")
        options = []
        for editor in Editor:
            reason = editor_unavailable(editor.value)
            if image is not None and editor.value not in image.editors:
                reason = f"The {image.label} image does not serve {EDITOR_LABELS[editor]}."
            options.append(
                EditorOption(editor.value, EDITOR_LABELS[editor], editor.value == chosen, reason)
            )
        if not self.is_bound and not any(o.checked and not o.reason for o in options):
            # A fresh form starts on an editor it can serve, if there is one.
            usable = next((o for o in options if not o.reason), None)
            if usable is not None:
                options = [EditorOption(o.value, o.label, o is usable, o.reason) for o in options]
        return options
