"""A notebook's states, named exactly as in the product contract (PRODUCT.md). Plain choices:
the engine reads them while its models load (registry.py)."""

from django.db import models


class NotebookState(models.TextChoices):
    """Notebook states, named exactly as in the product contract."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    DELETING = "DELETING"
