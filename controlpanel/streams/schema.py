"""The live log streams in the OpenAPI description (drf-spectacular's postprocessing hook): the
streams are served before Django (controlpanel/streams/asgi.py), so no view describes them.
Each workload's `.../logs/` path gets its `.../logs/stream/` beside it, with the same path
parameters and tags (docs/streams.md is the contract)."""

from __future__ import annotations

from typing import Any

DESCRIPTION = (
    "The workload's log as it is stored, and its states, as Server-Sent Events "
    "(`text/event-stream`): an event `line` per log line (its `id` is the line number, its "
    'data `{"n", "time", "text", "html", "event"}`), `state` on a change of state, `end` when '
    "the log of the followed run is complete or the viewer lost access (the stream closes "
    "after it), and a comment every 15 s. `Last-Event-ID` or `after` resumes after that line, "
    "nothing lost and nothing repeated. Served by the events server (STREAMS_URL); the logs "
    'page names it in its `Link` header (`rel="stream"`). The same authorization as the logs.'
)
STREAM_PARAMETERS = [
    {
        "in": "query",
        "name": "after",
        "schema": {"type": "integer", "minimum": 0},
        "description": "Send the lines after this line number (as Last-Event-ID).",
    },
    {
        "in": "query",
        "name": "run",
        "schema": {"type": "integer", "minimum": 1},
        "description": "Follow this run (default: the latest); an earlier run's lines, then `end`.",
    },
    {
        "in": "header",
        "name": "Last-Event-ID",
        "schema": {"type": "string"},
        "description": "The last line number received: resume after it.",
    },
]
REFUSALS = {
    "400": "A bad `after` or `run`, said in a sentence.",
    "401": "No session or token.",
    "404": "No such workload in the caller's projects.",
    "429": "The caller has STREAMS_MAX_PER_USER streams open already.",
}


def describe_streams(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    paths = result.get("paths", {})
    for path, item in list(paths.items()):
        logs = item.get("get")
        if not (path.startswith("/api/v1/") and path.endswith("/logs/") and logs):
            continue
        path_parameters = [p for p in logs.get("parameters", []) if p.get("in") == "path"]
        answers: dict[str, Any] = {
            "200": {
                "description": "The stream.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        }
        answers |= {code: {"description": text} for code, text in REFUSALS.items()}
        operation = {
            "operationId": logs["operationId"].removesuffix("_retrieve") + "_stream",
            "summary": "Follow the log live (Server-Sent Events)",
            "description": DESCRIPTION,
            "parameters": path_parameters + STREAM_PARAMETERS,
            "tags": logs.get("tags", []),
            "security": logs.get("security", []),
            "responses": answers,
        }
        paths[path + "stream/"] = {"get": operation}
    return result
