"""Incremental pod logs with no gaps and no duplicates.

The kubelet only accepts `sinceTime` to the second, so each read asks from the second of the
last line seen (`timestamps=true` prefixes every line with its RFC 3339 nanosecond time) and
drops what the cursor has already returned: lines older than the cursor's time, and the first
`count` lines carrying exactly the cursor's time. The cursor is
`<pod uid>|<last time in ns>|<lines seen at that time>`; a new pod (a re-admitted Job) starts
from its beginning.

A read returns at most MAX_BYTES. When that much cannot move the cursor (more than MAX_BYTES
written within one second, or one line longer than that), the cursor jumps to the next second
and the read says how many bytes it passed over: collection never stalls.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime

from deploy.kubernetes.api import KubeApi

MAX_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Cursor:
    """Where the last read stopped."""

    pod_uid: str
    last_ns: int = -1
    count: int = 0

    def encode(self) -> str:
        return f"{self.pod_uid}|{self.last_ns}|{self.count}"

    @classmethod
    def decode(cls, text: str | None, *, pod_uid: str) -> Cursor:
        """The cursor for `pod_uid`: a cursor of another pod (or none) starts over."""
        if text:
            uid, _, rest = text.partition("|")
            last, _, count = rest.partition("|")
            if uid == pod_uid and last.lstrip("-").isdigit() and count.isdigit():
                return cls(uid, int(last), int(count))
        return cls(pod_uid)


def parse_timestamp(text: str) -> int:
    """RFC 3339 with up to nanoseconds ('2024-05-01T10:00:00.123456789Z') to epoch ns."""
    main, _, zone = text.rstrip("Z").partition("+")
    seconds, _, fraction = main.partition(".")
    base = datetime.fromisoformat(seconds).replace(tzinfo=UTC)
    nanos = int((fraction + "000000000")[:9]) if fraction else 0
    offset = 0
    if zone:
        hours, _, minutes = zone.partition(":")
        offset = (int(hours) * 60 + int(minutes or 0)) * 60
    return (int(base.timestamp()) - offset) * 1_000_000_000 + nanos


def since_time(last_ns: int) -> str | None:
    """The `sinceTime` for a cursor: its second, rounded down."""
    if last_ns < 0:
        return None
    moment = datetime.fromtimestamp(last_ns // 1_000_000_000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def split_lines(body: str) -> list[tuple[int, str]]:
    """(time in ns, text) of each complete line; a line without its newline yet (cut by
    `limitBytes`) is left for the next read."""
    result = []
    for line in body.split("\n")[:-1]:
        stamp, _, text = line.partition(" ")
        try:
            result.append((parse_timestamp(stamp), text.rstrip("\r")))
        except ValueError:
            continue  # not a timestamped line (the kubelet never sends one); skip it
    return result


def new_lines(
    lines: list[tuple[int, str]], cursor: Cursor, *, limit: int
) -> tuple[list[str], Cursor]:
    """The lines after `cursor` (at most `limit`) and the cursor after them."""
    seen_at_last = 0
    last_ns, count = cursor.last_ns, cursor.count
    fresh: list[str] = []
    for stamp, text in lines:
        if stamp < cursor.last_ns:
            continue
        if stamp == cursor.last_ns:
            seen_at_last += 1
            if seen_at_last <= cursor.count:
                continue
        if len(fresh) >= limit:
            break
        fresh.append(text)
        count = count + 1 if stamp == last_ns else 1
        last_ns = stamp
    return fresh, Cursor(cursor.pod_uid, last_ns, count)


def rotated_gap(lines: list[tuple[int, str]], cursor: Cursor) -> str:
    """What a read from `cursor`'s second says was lost, or "": the read starts at that second,
    so it holds the `count` lines the cursor saw at its time unless the kubelet rotated the log
    file since (the API serves the current file only). Lines after them with fewer of them
    present: everything printed in between went with the rotated file."""
    if cursor.last_ns < 0 or cursor.count == 0:
        return ""
    at_cursor = sum(1 for stamp, _ in lines if stamp == cursor.last_ns)
    later = [stamp for stamp, _ in lines if stamp > cursor.last_ns]
    if at_cursor >= cursor.count or not later:
        return ""
    start = datetime.fromtimestamp(cursor.last_ns / 1e9, tz=UTC)
    end = datetime.fromtimestamp(later[0] / 1e9, tz=UTC)
    return (
        f"— lines printed between {start:%Y-%m-%d %H:%M:%S} and {end:%H:%M:%S} UTC skipped "
        "(log rotated: the kubelet rotated the log file before they were read) —"
    )


@dataclass(frozen=True)
class PodLogRead:
    lines: list[str]
    cursor: str
    at_end: bool  # the read reached the current end of the log
    skipped: str = ""  # what was passed over, for the log itself
    gap: str = ""  # what was lost before `lines` (a rotated log file)


def read_pod_log(
    api: KubeApi,
    *,
    namespace: str,
    pod: str,
    pod_uid: str,
    container: str,
    cursor: str | None,
    limit: int,
    deadline_s: float | None = None,
) -> PodLogRead:
    position = Cursor.decode(cursor, pod_uid=pod_uid)
    body = api.pod_log(
        namespace,
        pod,
        container=container,
        since_time=since_time(position.last_ns),
        limit_bytes=MAX_BYTES,
        deadline_s=deadline_s,
    )
    size = len(body.encode())
    truncated = size >= MAX_BYTES
    lines = split_lines(body)
    fresh, after = new_lines(lines, position, limit=limit)
    if truncated and not fresh:
        return _skip(body, size, position)
    gap = rotated_gap(lines, position)
    return PodLogRead(fresh, after.encode(), not truncated and len(fresh) < limit, gap=gap)


def _skip(body: str, size: int, position: Cursor) -> PodLogRead:
    """A full read with nothing new in it: jump past the second it is stuck in (the one of the
    line cut at MAX_BYTES, else the cursor's own)."""
    complete, _, partial = body.rpartition("\n")
    stuck = position.last_ns
    with suppress(ValueError):  # no timestamp in the cut line: the cursor's second is stuck
        stuck = max(stuck, parse_timestamp(partial.partition(" ")[0]))
    next_second = (max(stuck, 0) // 1_000_000_000 + 1) * 1_000_000_000
    passed = size - len(complete.encode()) - (1 if complete else 0)
    at = datetime.fromtimestamp(next_second // 1_000_000_000 - 1, tz=UTC)
    note = (
        f"at least {passed} bytes of log skipped at {at:%Y-%m-%d %H:%M:%S} UTC: more than "
        f"{MAX_BYTES // (1024 * 1024)} MiB within one second, or a line longer than that"
    )
    return PodLogRead([], Cursor(position.pod_uid, next_second, 0).encode(), False, note)
