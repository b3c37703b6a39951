"""`logs --follow` over the workload's live stream (Server-Sent Events, docs/streams.md): the
lines as they are stored, with no poll. The logs API names the stream in a `Link` header
(rel="stream") when the panel serves one; a dropped stream is reopened with `Last-Event-ID`
(nothing lost, nothing repeated); a stream that cannot be opened, or none named, leaves the
caller to poll from the last line printed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from controlpanel.cli.client import Api, ApiError

# A stream's read waits for the next event or heartbeat (STREAMS_HEARTBEAT_SECONDS, 15 s).
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
# A dropped stream is reopened every REOPEN_AFTER_S for REOPEN_FOR_S (a restarted pod, a
# proxy's timeout) before going back to polling.
REOPEN_AFTER_S = 1.0
REOPEN_FOR_S = 30.0


class Unavailable(Exception):
    """The stream could not be opened (or kept): poll instead."""


def follow_stream(
    api: Api, url: str, *, after: int, echo: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Print the lines after `after` from the stream at `url` until its `end`; the end's
    data (`run`, `lines`). Unavailable, with the last line printed, when it cannot go on."""
    opened, give_up = False, time.monotonic() + REOPEN_FOR_S
    while True:
        try:
            for name, data in _events(api, url, after):
                opened, give_up = True, time.monotonic() + REOPEN_FOR_S
                if name == "line":
                    echo({"seq": data["n"], "text": data["text"], "event": data["event"]})
                    after = data["n"]
                elif name == "end":
                    if "reason" in data:  # the viewer lost the project
                        raise ApiError(403, str(data["reason"]))
                    return dict(data)
        except (httpx.TransportError, Unavailable) as error:
            if not opened or time.monotonic() > give_up:
                raise Unavailable(after) from error
        time.sleep(REOPEN_AFTER_S)  # ended without `end`: reopen from `after`


def _events(api: Api, url: str, after: int) -> Iterator[tuple[str, dict[str, Any]]]:
    headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
    with api.http.stream("GET", url, headers=headers, timeout=STREAM_TIMEOUT) as response:
        kind = response.headers.get("content-type", "")
        if response.status_code != 200 or not kind.startswith("text/event-stream"):
            raise Unavailable(after)
        yield "open", {}
        name, data = "message", ""
        for line in response.iter_lines():
            if line == "":
                if data:
                    yield name, json.loads(data)
                name, data = "message", ""
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].removeprefix(" ")
