"""An app's states, named exactly as in the product contract (PRODUCT.md). Plain choices: the
engine reads them while its models load (registry.py)."""

from django.db import models

from controlpanel.engine.states import SERVER_STATES


class AppState(models.TextChoices):
    """App states, named exactly as in the product contract. DELETING is the engine's, shared
    with notebooks: an app's objects are going, then its row."""

    QUEUED = "QUEUED"
    INITIALIZING = "INITIALIZING"
    SCALING = "SCALING"
    RUNNING, STOPPING, STOPPED, FAILED, ERROR, DELETING = SERVER_STATES
