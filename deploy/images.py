"""Container images `deploy/` puts in pods. Override per request (`sync_image`) or per backend."""

from __future__ import annotations

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
