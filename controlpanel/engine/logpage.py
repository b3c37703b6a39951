"""One read model of a workload's log (a job's, a notebook's): a page of stored lines, the same
for the job and notebook pages, their htmx fragments, the plain log page and the API, so they
cannot disagree about where a page ends, whether more lines will come, or which lines are
progress events.

A progress event (a line `training.protocol` recognises) is flagged, not removed: the page hides
it by default and draws it as the progress panel; the API says `"event": true`; the download
keeps the log as printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from controlpanel.engine import logs
from controlpanel.engine.ansi import ansi_to_html
from controlpanel.engine.models import Workload
from training.protocol import is_event


@dataclass(frozen=True)
class LogLine:
    """One stored line; `event` when it is a progress event rather than a line for people."""

    seq: int
    text: str
    event: bool

    @cached_property
    def html(self) -> str:
        return ansi_to_html(self.text)


@dataclass(frozen=True)
class LogPage:
    """Lines `after` < seq ≤ `next` of one run; `eof` once the run ended and none is left."""

    run: int
    after: int
    lines: tuple[LogLine, ...]
    next: int
    eof: bool
    total: int  # lines the run stored so far

    @property
    def following(self) -> bool:
        """Whether a reader should ask again for more (the page keeps polling)."""
        return not self.eof

    @property
    def truncated(self) -> bool:
        """Whether lines before this page exist (a tail of a longer log)."""
        return self.after > 0


def log_page(*, job: Workload, after: int = 0, limit: int = 500, run: int | None = None) -> LogPage:
    """Up to `limit` lines of `run` (default: the current run) after sequence number `after`."""
    run = run or job.run
    return _page(job, run, after, limit, logs.run_line_count(job=job, run=run))


def log_tail(*, job: Workload, count: int = 500, run: int | None = None) -> LogPage:
    """The last `count` lines of a run, found by sequence number (an index range, not a scan)."""
    run = run or job.run
    total = logs.run_line_count(job=job, run=run)
    return _page(job, run, max(total - count, 0), count, total)


def _page(job: Workload, run: int, after: int, limit: int, total: int) -> LogPage:
    rows = logs.lines_after(job=job, after=after, limit=limit, run=run)
    lines = tuple(LogLine(seq=row.seq, text=row.text, event=is_event(row.text)) for row in rows)
    last = lines[-1].seq if lines else after
    # An earlier run is over; the current one once it ended and its log is archived.
    ended = run < job.run or (job.is_final and job.logs_archived)
    return LogPage(
        run=run,
        after=after,
        lines=lines,
        next=last,
        eof=ended and last >= total,
        total=total,
    )
