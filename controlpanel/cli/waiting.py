"""`logs --follow` on a workload that has not started (#32): instead of minutes of silence, its
state, its place in the queue (the API's `queue_position`) and why it waits, on stderr (stdout
stays the log), said again each time it changes; the log follows once it starts."""

from __future__ import annotations

import re
import time
from typing import Any

import click

from controlpanel.cli.client import Api

WAIT_PERIOD_S = 2.0
# Before these a run prints nothing: waiting for admission (QUEUED) or for a node (PENDING).
# A notebook's STARTING waits only while it has a queue position.
NOT_STARTED = ("QUEUED", "PENDING")
# Admission writes the place into the reason too (engine/selectors.POSITION_SAID): said once.
POSITION_SAID = re.compile(r";? ?position \d+ in the queue$")


def waiting_line(workload: dict[str, Any]) -> str | None:
    """What a waiting workload is doing, in a line ("Queued (2nd in the queue for alpha): CPU
    quota ...; waiting for it to start…"), or None once it is no longer waiting."""
    place = (workload.get("queue_position") or {}).get("said")
    state = str(workload.get("state", ""))
    if not place and state not in NOT_STARTED:
        return None
    reason = str(workload.get("state_reason") or "")
    if place:
        reason = POSITION_SAID.sub("", reason)
    line = state.capitalize() + (f" ({place})" if place else "")
    return f"{line}{': ' + reason if reason else ''}; waiting for it to start…"


def wait_to_start(api: Api, base: str) -> None:
    """Say how the workload at `base` waits, each time that changes, until it no longer does."""
    said = None
    while True:
        line = waiting_line(api.get(base))
        if line is None:
            return
        if line != said:
            click.echo(line, err=True)
            said = line
        time.sleep(WAIT_PERIOD_S)
