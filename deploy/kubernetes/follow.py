"""A pod's log followed as a stream (`follow=true`, as `kubectl logs -f`) instead of read again
and again: the kubelet sends each line as it is written, and re-parses its file from the first
line only when a stream is opened (a `sinceTime` read does so on every read).

The stream opens at the cursor's second and goes through the same cursor as the reads
(logs.py): lines the cursor returned already are dropped, and a log rotated since the cursor
is marked (`rotated_gap`). A reader thread takes what the kubelet sends; lines are handed on in
batches every `batch_s` (one database write per batch, not per line). The stream ends with the
container, when `keep()` turns false, or when nothing came for `idle_s` (a dead connection):
the caller opens it again from the stored cursor.
"""

from __future__ import annotations

import codecs
import queue
import threading
import time
from collections.abc import Callable, Iterator

from deploy.kubernetes.api import KubeApi
from deploy.kubernetes.logs import (
    Cursor,
    PodLogRead,
    new_lines,
    rotated_gap,
    since_time,
    split_lines,
)

BATCH_S = 0.25
BATCH_LINES = 2000
_END = object()


def follow_pod_log(
    api: KubeApi,
    *,
    namespace: str,
    pod: str,
    pod_uid: str,
    container: str,
    cursor: str | None,
    keep: Callable[[], bool],
    idle_s: float,
    batch_s: float = BATCH_S,
) -> Iterator[PodLogRead]:
    """Batches of new lines as the pod prints them; `at_end` on the last one when the stream
    ended by itself (the container ended). Errors of the stream are raised after the lines
    that came before them were handed on."""
    position = Cursor.decode(cursor, pod_uid=pod_uid)
    chunks = api.follow_pod_log(
        namespace, pod, container=container, since_time=since_time(position.last_ns), idle_s=idle_s
    )
    inbox: queue.Queue[object] = queue.Queue()
    stopped = threading.Event()
    threading.Thread(
        target=_pump, args=(chunks, inbox, stopped), name=f"log-follow-{pod}", daemon=True
    ).start()
    pending, first, ended = "", True, False
    try:
        while not ended and keep():
            batch, ended, error = _gather(inbox, batch_s)
            pending += batch
            complete, _, pending = pending.rpartition("\n")
            lines = split_lines(complete + "\n") if complete else []
            gap = rotated_gap(lines, position) if first and lines else ""
            first = first and not lines
            fresh, position = new_lines(lines, position, limit=len(lines))
            if fresh or gap or ended:
                yield PodLogRead(fresh, position.encode(), ended and error is None, gap=gap)
            if error is not None:
                raise error
    finally:
        stopped.set()


def _gather(inbox: queue.Queue[object], batch_s: float) -> tuple[str, bool, Exception | None]:
    """What the kubelet sent within `batch_s` (or up to BATCH_LINES lines); whether the stream
    ended, and how if it broke."""
    deadline = time.monotonic() + batch_s
    parts: list[str] = []
    lines = 0
    while (left := deadline - time.monotonic()) > 0 and lines < BATCH_LINES:
        try:
            item = inbox.get(timeout=left)
        except queue.Empty:
            break
        if item is _END:
            return "".join(parts), True, None
        if isinstance(item, Exception):
            return "".join(parts), True, item
        parts.append(str(item))
        lines += parts[-1].count("\n")
    return "".join(parts), False, None


def _pump(chunks: Iterator[bytes], inbox: queue.Queue[object], stopped: threading.Event) -> None:
    """The reader thread: the stream's bytes into `inbox`, then its end (or its error). A
    follower that stopped listening ends it at the next chunk or at the idle time-out."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # split characters
    try:
        for data in chunks:
            if stopped.is_set():
                return
            inbox.put(decoder.decode(data))
        inbox.put(_END)
    except Exception as exc:  # the stream broke: the follower resumes from its cursor
        inbox.put(exc)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
