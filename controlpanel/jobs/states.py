"""A job's states, named exactly as in the product contract (PRODUCT.md). Plain choices: the
engine reads them while its models load (registry.py)."""

from django.db import models


class JobState(models.TextChoices):
    """Job states, named exactly as in the product contract."""

    QUEUED = "QUEUED"
    INITIALIZING = "INITIALIZING"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    INTERRUPTING = "INTERRUPTING"
    TIMEOUT = "TIMEOUT"
    FINALIZING = "FINALIZING"
    DONE = "DONE"
    INTERRUPTED = "INTERRUPTED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    SYNC_FAILED = "SYNC_FAILED"
