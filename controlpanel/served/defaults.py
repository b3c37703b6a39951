"""The images a new install lets apps run: Ajuste's own serving image. Admins edit the list
afterwards (Django admin, App images)."""

from __future__ import annotations

from typing import Any

from deploy import images

DEFAULT_APP_IMAGES = [(images.SERVING_IMAGE, "Ajuste's serving image (vLLM with LoRA adapters)")]


def ensure_default_app_images(model: Any) -> None:
    """Add the default images that are missing (the migration's model, or the real one)."""
    for image, label in DEFAULT_APP_IMAGES:
        model.objects.get_or_create(image=image, defaults={"label": label})
