"""The framework images a new install offers notebooks (the Jupyter project's images on
quay.io, and code-server's); admins edit the list afterwards (Django admin, Notebook images)."""

from __future__ import annotations

from typing import Any

# name, label, image, editors it serves
DEFAULT_IMAGES = [
    ("python", "Python", "quay.io/jupyter/minimal-notebook:python-3.12", ["jupyterlab"]),
    ("pytorch", "PyTorch", "quay.io/jupyter/pytorch-notebook:cuda12-python-3.12", ["jupyterlab"]),
    (
        "huggingface",
        "Hugging Face (PyTorch, transformers)",
        "quay.io/jupyter/pytorch-notebook:cuda12-python-3.12",
        ["jupyterlab"],
    ),
    (
        "tensorflow",
        "TensorFlow",
        "quay.io/jupyter/tensorflow-notebook:cuda-python-3.12",
        ["jupyterlab"],
    ),
    ("vscode", "VS Code (code-server)", "docker.io/codercom/code-server:4.96.4", ["vscode"]),
]


def ensure_default_images(model: Any) -> None:
    """Add the default images that are missing (the migration's model, or the real one)."""
    for order, (name, label, image, editors) in enumerate(DEFAULT_IMAGES):
        model.objects.get_or_create(
            name=name, defaults={"label": label, "image": image, "editors": editors, "order": order}
        )
