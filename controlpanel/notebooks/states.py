"""A notebook's states, named exactly as in the product contract (PRODUCT.md). Plain choices:
the engine reads them while its models load (registry.py)."""

from django.db import models

from controlpanel.engine.states import SERVER_STATES


class NotebookState(models.TextChoices):
    """Notebook states, named exactly as in the product contract."""

    STARTING = "STARTING"
    RUNNING, STOPPING, STOPPED, FAILED, ERROR, DELETING = SERVER_STATES
