"""A batch's states: a subset of the job's names, with the same finality (the engine checks
that no name is final for one kind and live for another)."""

from django.db import models


class BatchState(models.TextChoices):
    QUEUED = "QUEUED", "Queued"
    RUNNING = "RUNNING", "Running"
    INTERRUPTING = "INTERRUPTING", "Interrupting"
    DONE = "DONE", "Done"
    INTERRUPTED = "INTERRUPTED", "Interrupted"
    FAILED = "FAILED", "Failed"
    ERROR = "ERROR", "Error"
