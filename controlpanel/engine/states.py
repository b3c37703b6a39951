"""The states every kind that serves until stopped (notebooks, apps: registry.server_kind)
ends its list with, in this order. A kind's TextChoices unpacks them after its own first
states, so its choices, and the migrations that spell them, keep their order."""

SERVER_STATES = ("RUNNING", "STOPPING", "STOPPED", "FAILED", "ERROR", "DELETING")
