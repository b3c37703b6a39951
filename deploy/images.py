"""Container images `deploy/` puts in pods. Override per request (`sync_image`) or per backend."""

from __future__ import annotations

from collections.abc import Mapping

from deploy.version import REGISTRY, VERSION

# The built-in fine-tune image: runs `python -m training.finetune ...` (training/Dockerfile).
FINETUNE_IMAGE = f"{REGISTRY}/finetune:{VERSION}"
# Its torch is a CUDA 13 build, which dropped Volta (V100, 7.0): Turing (7.5) and newer only.
FINETUNE_MIN_COMPUTE_CAPABILITY = (7, 5)

# The panel/worker image: it contains `storage/`, so it runs the volume sync engine
# (`python -m storage.sync pull|push ...`) in init containers, sidecars and finalize Jobs.
SYNC_IMAGE = f"{REGISTRY}/ajuste:{VERSION}"

# Notebook editors' default images when the panel names none of its own.
JUPYTERLAB_IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11"
VSCODE_IMAGE = "docker.io/codercom/code-server:4.96.4"

# Apps' default image: vLLM's OpenAI-compatible server with LoRA adapters (images/serving/;
# `python -m deploy.local.serve` stands in for it on the local backend).
SERVING_IMAGE = f"{REGISTRY}/serving:{VERSION}"

# Images an operator's kustomize overlay can move with the same `images:` entries as the
# panel's own: k8s/config.env carries each under its setting (k8s/image-fields.yaml lets
# `images:` rewrite it), and a workload that asks for the default runs the image the setting
# names instead (KubernetesBackend's `images`). The editors' are the notebook images a new
# install offers (controlpanel/engine/defaults.py).
MOVABLE = {
    "AJUSTE_SERVING_IMAGE": SERVING_IMAGE,
    "AJUSTE_JUPYTER_MINIMAL_IMAGE": "quay.io/jupyter/minimal-notebook:python-3.12",
    "AJUSTE_JUPYTER_PYTORCH_IMAGE": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.12",
    "AJUSTE_JUPYTER_TENSORFLOW_IMAGE": "quay.io/jupyter/tensorflow-notebook:cuda-python-3.12",
    "AJUSTE_CODE_SERVER_IMAGE": VSCODE_IMAGE,
}


def moved_images(settings: Mapping[str, str]) -> dict[str, str]:
    """Default image -> the image to run instead, from the MOVABLE settings given (empty or
    equal to the default: not moved)."""
    moved = {}
    for name, default in MOVABLE.items():
        value = (settings.get(name) or "").strip()
        if value and value != default:
            moved[default] = value
    return moved
