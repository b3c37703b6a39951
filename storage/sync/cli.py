"""`python -m storage.sync pull|push SPEC [SPEC ...] --root DIR [--state-dir D] [--every S]
[--progress-file F] [--summary-file F] [--workers N]`: the command a pod's init container
(pull) and finalize/sidecar container (push) runs. deploy/ relies on this contract exactly.

- The local directory of a spec is ROOT / mount_path without its leading '/'.
- Credentials: AJUSTE_DATASTORE_<ALIAS>_{ENDPOINT_URL,REGION,ACCESS_KEY,SECRET_KEY}.
- pull pulls every spec; push pushes rw/rwd specs and skips ro ones.
- --state-dir D: where the pull records each volume's manifest, the base of the three-way
  push (storage/sync/manifest.py); each push reads it and moves it forward. Default:
  ROOT/.ajuste-sync (outside every volume, which are under ROOT/workspace), so a pull and a
  later push of the same --root share their base without naming it.
- --allow-conflicts: conflicts alone exit 0 (the panel's pods and local runs pass it: the
  panel records them as a note on the run); without it they exit 3.
- --every S (push only): push every S seconds until SIGTERM/SIGINT, then push once more, exit.
- stdout: one JSON object per line: {"event": "progress"|"result"|"skip", "direction", "spec",
  "local_dir", "total", "processed", "failed", "skipped", "deleted", "transferred",
  "transferred_bytes", "elapsed_s", "final"}; "result" lines add "failures": [{key, error}]
  and "conflicts": [keys changed on both sides, whose remote copy was kept]. After each push
  of every volume, one summary line: {"event": "push", "uploaded", "deleted", "failed",
  "conflicts": [keys], "conflicts_total", "final"}.
- --progress-file F: rewritten atomically with {"direction", "updated", "volumes": [the last
  line of each spec]}, for whoever watches the workload.
- --summary-file F (push): the summary line of a push without failures, cut to 4 KiB
  (conflict keys dropped first), as Kubernetes reads a termination message
  (/dev/termination-log); a failed push leaves it alone.
- --state-dir, --progress-file and --summary-file are refused inside a volume's directory: a
  volume's bucket must never see nor rewrite them.
- pull, when a writable volume is mounted at /workspace/output: once every volume is pulled,
  what was read (keys, ETags, versions, a digest per volume) is written into it as
  .ajuste/lineage.json (storage/sync/lineage.py); the run's push carries it to the bucket.
- Exit status: 0 everything transferred; 1 some files failed; 2 bad usage, bad spec or missing
  credentials; 3 (push) pushed, but files changed on both sides were left behind, their
  remote copy kept (conflicts, unless --allow-conflicts). 1 and 3 name the files on stderr
  (at most MAX_NAMED), as 2 says what is wrong.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from storage.datastore import DatastoreConfig
from storage.sync import lineage
from storage.sync.engine import DEFAULT_WORKERS, pull
from storage.sync.manifest import ManifestError, manifest_path
from storage.sync.pushing import push
from storage.sync.reporting import Reporter, Volume
from storage.sync.reporting import summary_text as summary_text  # tests import it here
from storage.sync.stats import SyncStats
from storage.volumes import (
    Mode,
    VolumeSpecError,
    check_mount_paths,
    parse_volume_spec,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFLICTS = 0, 1, 2, 3
DEFAULT_STATE_DIR = ".ajuste-sync"  # under --root
MAX_NAMED = 20  # files named on stderr; the JSON lines have them all


class UsageError(Exception):
    """Bad arguments, a bad spec or missing credentials: exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m storage.sync",
        description="Pull volumes into a directory tree, or push them back.",
    )
    parser.add_argument("direction", choices=["pull", "push"])
    parser.add_argument(
        "specs",
        nargs="+",
        metavar="SPEC",
        help="<bucket>@<ALIAS>[/<prefix>]:<mount path>[:ro|rw|rwd]",
    )
    parser.add_argument(
        "--root",
        type=Path,
        required=True,
        help="directory that mount paths are under ('/' in a pod)",
    )
    parser.add_argument("--progress-file", type=Path, default=None, metavar="FILE")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the pull records each volume's manifest (the base of later pushes); "
        f"default ROOT/{DEFAULT_STATE_DIR}",
    )
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N")
    _add_push_options(parser)
    return parser


def _add_push_options(parser: argparse.ArgumentParser) -> None:
    """The options that only matter to a push."""
    parser.add_argument(
        "--every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="push: repeat every SECONDS until SIGTERM, then push once more",
    )
    parser.add_argument(
        "--allow-conflicts",
        action="store_true",
        help="push: exit 0 when files changed on both sides were kept remotely (default: 3)",
    )
    parser.add_argument(
        "--summary-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="push: write the summary there too (Kubernetes: /dev/termination-log)",
    )
    parser.add_argument(
        "--only-index",
        type=int,
        default=None,
        metavar="I",
        help="push: only in the pod of JOB_COMPLETION_INDEX I (a multi-node job's node 0); "
        "elsewhere push nothing (an --every sidecar waits for its SIGTERM)",
    )


def resolve_volumes(
    texts: Sequence[str],
    root: Path,
    environ: dict[str, str] | os._Environ[str],
    state_dir: Path | None = None,
) -> list[Volume]:
    """Parse the specs and find their credentials; UsageError says what is wrong."""
    specs = []
    for text in texts:
        try:
            specs.append(parse_volume_spec(text))
        except VolumeSpecError as error:
            raise UsageError(_spec_error(error, text)) from None
    try:
        check_mount_paths(specs)
    except VolumeSpecError as error:
        raise UsageError(str(error)) from None
    volumes = []
    for spec in specs:
        try:
            config = DatastoreConfig.from_env(spec.alias, environ)
        except KeyError as error:
            raise UsageError(str(error.args[0])) from None
        manifest = manifest_path(state_dir, spec) if state_dir is not None else None
        volumes.append(Volume(spec, config, root / spec.mount_path.lstrip("/"), manifest))
    return volumes


def check_outside_volumes(volumes: Sequence[Volume], **paths: Path | None) -> None:
    """UsageError when one of `paths` (the state dir, the progress file...) would sit in a
    volume's directory, where the pull could overwrite it from the bucket and the push
    upload it there."""
    for option, path in paths.items():
        if path is None:
            continue
        for volume in volumes:
            if _inside(path, volume.local_dir):
                flag = "--" + option.replace("_", "-")
                raise UsageError(
                    f"{flag} {path} is inside the directory of volume {volume.text} "
                    f"({volume.local_dir}): keep it outside every volume"
                )


def _inside(path: Path, directory: Path) -> bool:
    lexical = os.path.abspath(path), os.path.abspath(directory)
    resolved = path.resolve(), directory.resolve()
    return any(Path(p).is_relative_to(d) for p, d in (lexical, resolved))


def _spec_error(error: VolumeSpecError, text: str) -> str:
    caret = " " * (error.position or 0) + "^"
    return f"bad volume spec: {error.message}\n  {text}\n  {caret}"


def sync_once(
    volumes: Sequence[Volume],
    direction: str,
    reporter: Reporter,
    workers: int,
    *,
    final: bool = True,
) -> int:
    """Pull or push every volume once; the exit status of the run."""
    status = EXIT_OK
    results = []
    for volume in volumes:
        started = time.monotonic()
        if direction == "push" and volume.spec.mode is Mode.RO:
            reporter.emit("skip", volume, None, started, reason="read-only volume", final=final)
            continue
        stats = _sync_volume(volume, direction, reporter, workers, started)
        reporter.emit("result", volume, stats, started, final=final)
        results.append(stats)
        if not stats.ok:
            status = EXIT_FAILED
    if direction == "push":
        reporter.summary(results, final=final)
    return status


def _sync_volume(
    volume: Volume, direction: str, reporter: Reporter, workers: int, started: float
) -> SyncStats:
    def progress(stats: SyncStats) -> None:
        reporter.progress(volume, stats, started)

    sync = pull if direction == "pull" else push
    return sync(
        volume.config,
        volume.spec,
        volume.local_dir,
        workers=workers,
        progress=progress,
        manifest=volume.manifest,
    )


def push_every(
    volumes: Sequence[Volume],
    reporter: Reporter,
    workers: int,
    every: float,
    stop: threading.Event | None = None,
) -> int:
    """The checkpoint sidecar: push every `every` seconds; on SIGTERM/SIGINT, a final push."""
    stop = stop or threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(every):
        volumes = fresh_credentials(volumes, os.environ)
        sync_once(volumes, "push", reporter, workers, final=False)
    return sync_once(fresh_credentials(volumes, os.environ), "push", reporter, workers, final=True)


def fresh_credentials(
    volumes: Sequence[Volume], environ: dict[str, str] | os._Environ[str]
) -> list[Volume]:
    """The volumes with their datastore read again: short-lived keys (STS) are renewed by the
    panel into the mounted files while a job runs for days. Unreadable now: keep the last."""
    fresh = []
    for volume in volumes:
        try:
            config = DatastoreConfig.from_env(volume.spec.alias, environ)
        except KeyError:
            config = volume.config
        fresh.append(replace(volume, config=config))
    return fresh


def main(
    argv: Sequence[str] | None = None,
    environ: dict[str, str] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run the command; `stop` (set by a signal) ends an `--every` loop."""
    args = build_parser().parse_args(argv)
    try:
        _check_arguments(args)
        variables = os.environ if environ is None else environ
        state_dir = args.state_dir or args.root / DEFAULT_STATE_DIR
        volumes = resolve_volumes(args.specs, args.root, variables, state_dir)
        check_outside_volumes(
            volumes,
            state_dir=state_dir,
            progress_file=args.progress_file,
            summary_file=args.summary_file,
        )
    except UsageError as error:
        print(f"python -m storage.sync: {error}", file=sys.stderr)
        return EXIT_USAGE
    index = variables.get(INDEX_VARIABLE, "0")
    if args.only_index is not None and index != str(args.only_index):
        print(f"node {index} pushes nothing: node {args.only_index} pushes the volumes")
        if args.every is not None and stop is not None:
            stop.wait()  # a native sidecar that exits is restarted: it waits for the pod's end
        return EXIT_OK
    reporter = Reporter(args.direction, args.progress_file, sys.stdout, args.summary_file)
    if args.every is not None:
        status = push_every(volumes, reporter, args.workers, args.every, stop)
    else:
        status = sync_once(volumes, args.direction, reporter, args.workers)
        if args.direction == "pull" and status == EXIT_OK:
            status = _record_lineage(volumes)
    return _left_behind(reporter, status, allow_conflicts=args.allow_conflicts)


def _record_lineage(volumes: Sequence[Volume]) -> int:
    """What a complete pull read, written into the writable /workspace/output volume (see
    lineage.py): a run without its lineage fails here rather than train on unrecorded data."""
    try:
        lineage.record([(v.spec, v.config, v.manifest, v.local_dir) for v in volumes])
    except (OSError, ManifestError) as error:
        print(f"python -m storage.sync: cannot record the lineage: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _left_behind(reporter: Reporter, status: int, *, allow_conflicts: bool) -> int:
    """The exit status once what the last round left behind is named on stderr: a person who
    runs a push must not read 'done' when their changes are not in the bucket."""
    results = reporter.results()
    failures = [f"{f['key']}: {f['error']}" for line in results for f in line["failures"]]
    conflicts = [key for line in results for key in line["conflicts"]]
    if failures:
        total = sum(line["failed"] for line in results)
        _name(f"{total} file(s) not transferred", failures, total)
    if conflicts and not allow_conflicts:
        total = len(conflicts) + sum(line["conflicts_omitted"] for line in results)
        what = (
            f"{total} file(s) changed both here and in the bucket since the pull were not "
            "pushed (the bucket's copy was kept: compare, then push again)"
        )
        _name(what, conflicts, total)
        return status if status != EXIT_OK else EXIT_CONFLICTS
    return status


def _name(what: str, items: Sequence[str], total: int) -> None:
    shown = "".join(f"\n  {item}" for item in items[:MAX_NAMED])
    more = f"\n  ... and {total - min(len(items), MAX_NAMED)} more" if total > MAX_NAMED else ""
    print(f"python -m storage.sync: {what}:{shown}{more}", file=sys.stderr)


# What Kubernetes sets in every container of an Indexed Job's pod: the pod's index.
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"


def _check_arguments(args: argparse.Namespace) -> None:
    if args.only_index is not None and args.direction != "push":
        raise UsageError("--only-index only applies to push")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.every is not None and args.direction != "push":
        raise UsageError("--every only applies to push (the periodic checkpoint)")
    if args.every is not None and args.every <= 0:
        raise UsageError("--every must be a positive number of seconds")
