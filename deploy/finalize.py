"""The finalize Job's command: push the rw volumes of a finished run, but only if its volumes
had been pulled completely.

    python -m deploy.finalize PULL_PROGRESS_FILE -- push SPEC [SPEC ...] --root /

Why the guard: a run stopped or failed while its init container was still pulling leaves a
partial /workspace; pushing it back would be harmless for `rw` but would delete every object
not pulled yet for `rwd`. The pull writes its progress file (`storage.sync --progress-file`,
in the sync state folder beside its manifests, outside every volume: a bucket cannot forge it);
when it does not show every volume pulled without failure, this prints one `skip` line and
exits 0 having pushed nothing. Otherwise it becomes `python -m storage.sync push ...`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def pull_completed(progress_file: Path) -> bool:
    """Whether the progress file shows a finished pull of every volume, without failures."""
    try:
        progress = json.loads(progress_file.read_text())
    except (OSError, ValueError):
        return False
    volumes = progress.get("volumes") or []
    return (
        progress.get("direction") == "pull"
        and bool(volumes)
        and all(
            v.get("event") == "result"
            and v.get("final")
            and not v.get("failed")
            and not v.get("failures")
            for v in volumes
        )
    )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m deploy.finalize PULL_PROGRESS_FILE -- push SPEC... --root DIR")
        return 2
    if not pull_completed(Path(args[0])):
        reason = "the volumes were never completely pulled: nothing of this run to push"
        print(json.dumps({"event": "skip", "direction": "push", "reason": reason}), flush=True)
        return 0
    os.execv(sys.executable, [sys.executable, "-m", "storage.sync", *args[2:]])  # noqa: S606
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
