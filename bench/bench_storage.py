"""Storage benchmark: `storage.sync` pull/push against a plain sequential boto3 loop.

    .venv/bin/python bench/bench_storage.py [--small-files 1000] [--small-size 16384]
                                            [--big-mib 1024] [--workers 8]
    .venv/bin/python bench/bench_storage.py --tools [--small-files 1000] [--small-size 2048]
                                            [--rounds 5] [--transfers 16] [--only pull]

Both sides talk to the same embedded S3 server (s3rver on loopback, storage/embedded.py) with
the same client settings (storage/client.py). Cases:
- 1,000 small files: the baseline is a `for` loop of `put_object` / `get_object` (the fastest
  sequential calls: no TransferManager per file); sync runs with `--workers` threads.
- one large file: the baseline is boto3's own `upload_file` / `download_file` with its default
  TransferConfig (already multipart and threaded), against sync's 16 MiB parts.
- a repeated sync with nothing changed (what a periodic checkpoint pays).
Baseline and sync rounds alternate, twice each, and the best time of each side is kept.
Prints one line per measure and the ratio (sync throughput / baseline throughput).

`--tools` compares instead with the tools users know, each a command run from the start (as
its users run it): `rclone copy --transfers N` and `aws s3 sync` (rclone from apt, the AWS CLI
from pip, both on PATH) against `python -m storage.sync pull|push --workers N` (the command
pods run, interpreter start included) and `storage.sync.pull()|push()` called in this
process with N workers: the same number of parallel transfers (`--transfers`, 16) for rclone
and sync. On `--small-files` files of `--small-size` bytes. The four take turns, each round
into a new folder (pull) or a new prefix (push); per tool the median and p95 of `--rounds`
rounds, the CPU the command used (its own, not the server's), and the load average before
and after. `--only pull` (or push) times one direction.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage.client import make_s3_client  # noqa: E402
from storage.datastore import DatastoreConfig  # noqa: E402
from storage.embedded import start_embedded_s3  # noqa: E402
from storage.objects import create_bucket  # noqa: E402
from storage.sync import SyncStats, pull, push  # noqa: E402
from storage.volumes import Mode, VolumeSpec, render_volume_spec  # noqa: E402

MiB = 1024 * 1024
BUCKET = "bench"


def timed(action: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    action(*args)
    return time.perf_counter() - started


def make_small_files(root: Path, count: int, size: int) -> None:
    for index in range(count):
        path = root / f"shard-{index // 100:02}" / f"file-{index:04}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))


def make_big_file(path: Path, mib: int) -> None:
    block = os.urandom(64 * MiB)  # repeated: S3 stores bytes, content does not matter here
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for offset in range(0, mib, 64):
            out.write(block[: min(64, mib - offset) * MiB])


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def sequential_put(config: DatastoreConfig, root: Path, prefix: str) -> None:
    client = make_s3_client(config)
    for path in files_under(root):
        key = f"{prefix}/{path.relative_to(root).as_posix()}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())


def sequential_get(config: DatastoreConfig, prefix: str, root: Path) -> None:
    client = make_s3_client(config)
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        for entry in page.get("Contents", []):
            path = root / entry["Key"][len(prefix) + 1 :]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(client.get_object(Bucket=BUCKET, Key=entry["Key"])["Body"].read())


def report(label: str, seconds: float, size: int, count: int) -> float:
    rate = size / MiB / seconds
    print(f"{label:<44} {seconds:8.2f} s {rate:9.1f} MiB/s {count / seconds:9.1f} files/s")
    return rate


def check(stats: SyncStats) -> None:
    if not stats.ok:
        raise SystemExit(f"sync failed: {stats.failures[:3]}")


ROUNDS = 2


def compare(
    what: str,
    baseline: tuple[str, Callable[[int], object]],
    ours: Callable[[int], object],
    size: int,
    count: int,
) -> None:
    """Alternate baseline and storage.sync rounds (each round writes somewhere new), keep the
    best time of each (other work shares the 2 CPUs and the disk), print them and the ratio."""
    base_times, our_times = [], []
    for round_ in range(ROUNDS):
        base_times.append(timed(baseline[1], round_))
        our_times.append(timed(ours, round_))
    base = report(f"{what}: {baseline[0]}", min(base_times), size, count)
    mine = report(f"{what}: storage.sync.{what}", min(our_times), size, count)
    print(f"{what + ' ratio (sync / baseline)':<44} {mine / base:8.2f}x")


def volume(prefix: str) -> VolumeSpec:
    return VolumeSpec(BUCKET, "LOCAL", prefix, "/workspace/volume", Mode.RW)


def small_files_case(
    config: DatastoreConfig, work: Path, count: int, size: int, workers: int
) -> None:
    source, total = work / "small-src", count * size
    make_small_files(source, count, size)
    print(f"\n{count} files of {size // 1024} KiB ({total / MiB:.1f} MiB), {workers} workers")
    compare(
        "push",
        ("sequential put_object loop", lambda r: sequential_put(config, source, f"small-seq{r}")),
        lambda r: check(push(config, volume(f"small-sync{r}"), source, workers=workers)),
        total,
        count,
    )
    compare(
        "pull",
        (
            "sequential get_object loop",
            lambda r: sequential_get(config, "small-sync0", work / f"s{r}"),
        ),
        lambda r: check(pull(config, volume("small-sync0"), work / f"p{r}", workers=workers)),
        total,
        count,
    )
    again = timed(lambda: check(push(config, volume("small-sync0"), source, workers=workers)))
    report("push again, nothing changed (all skipped)", again, total, count)
    again = timed(lambda: check(pull(config, volume("small-sync0"), work / "p0", workers=workers)))
    report("pull again, nothing changed (all skipped)", again, total, count)


def big_file_case(config: DatastoreConfig, work: Path, mib: int, workers: int) -> None:
    source, size = work / "big-src", mib * MiB
    make_big_file(source / "model.bin", mib)
    print(f"\none file of {mib} MiB")
    client = make_s3_client(config)

    def upload(round_: int) -> None:
        client.upload_file(str(source / "model.bin"), BUCKET, f"big-seq{round_}/model.bin")

    def download(round_: int) -> None:
        target = work / "big-seq.bin"
        client.download_file(BUCKET, "big-sync0/model.bin", str(target))
        target.unlink()  # keep the disk footprint down

    def sync_pull(round_: int) -> None:
        check(pull(config, volume("big-sync0"), work / "big-pull", workers=workers))
        (work / "big-pull" / "model.bin").unlink()

    compare(
        "push",
        ("boto3 upload_file (default config)", upload),
        lambda r: check(push(config, volume(f"big-sync{r}"), source, workers=workers)),
        size,
        1,
    )
    compare("pull", ("boto3 download_file (default config)", download), sync_pull, size, 1)
    again = timed(lambda: check(push(config, volume("big-sync0"), source, workers=workers)))
    report("push again, unchanged (MD5 of the file)", again, size, 1)


def tool_env(config: DatastoreConfig) -> dict[str, str]:
    """The store's credentials for rclone (an `s3` remote named `bench`), the AWS CLI and
    `python -m storage.sync` (the LOCAL datastore)."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}  # plain http here
    env.update(
        AWS_ACCESS_KEY_ID=config.access_key,
        AWS_SECRET_ACCESS_KEY=config.secret_key,
        AWS_DEFAULT_REGION=config.region,
        RCLONE_CONFIG_BENCH_TYPE="s3",
        RCLONE_CONFIG_BENCH_PROVIDER="Other",
        RCLONE_CONFIG_BENCH_ENDPOINT=config.endpoint_url,
        RCLONE_CONFIG_BENCH_REGION=config.region,
        RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=config.access_key,
        RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=config.secret_key,
        RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE="true",
        AJUSTE_DATASTORE_LOCAL_ENDPOINT_URL=config.endpoint_url,
        AJUSTE_DATASTORE_LOCAL_REGION=config.region,
        AJUSTE_DATASTORE_LOCAL_ACCESS_KEY=config.access_key,
        AJUSTE_DATASTORE_LOCAL_SECRET_KEY=config.secret_key,
    )
    return env


def tools_case(
    config: DatastoreConfig,
    work: Path,
    count: int,
    size: int,
    rounds: int,
    transfers: int,
    only: str | None,
) -> None:
    for tool in ("rclone", "aws"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH (apt-get install rclone; pip install awscli)")
    env = tool_env(config)
    source = work / "tools-src" / "workspace" / "v"  # where the CLI's --root puts the volume
    make_small_files(source, count, size)
    check(push(config, volume("tools"), source))
    endpoint = config.endpoint_url
    n = str(transfers)

    def run(*command: str) -> None:
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, cwd=REPO)

    def cli(direction: str, prefix: str, root: Path) -> None:
        spec = render_volume_spec(VolumeSpec(BUCKET, "LOCAL", prefix, "/workspace/v", Mode.RW))
        run(
            sys.executable,
            "-m",
            "storage.sync",
            direction,
            spec,
            "--root",
            str(root),
            "--workers",
            n,
        )

    def pulled(root: Path) -> None:
        check(pull(config, volume("tools"), root, workers=transfers))

    rclone = ("rclone", "copy", "--transfers", n)
    aws = ("aws", "s3", "sync", "--only-show-errors", "--endpoint-url", endpoint)
    pulls: dict[str, Callable[[int], object]] = {
        f"python -m storage.sync pull --workers {n}": lambda r: cli(
            "pull", "tools", work / f"pc{r}"
        ),
        "storage.sync.pull() in process": lambda r: pulled(work / f"pp{r}"),
        f"rclone copy --transfers {n}": lambda r: run(
            *rclone, f"bench:{BUCKET}/tools", str(work / f"pr{r}")
        ),
        "aws s3 sync": lambda r: run(*aws, f"s3://{BUCKET}/tools", str(work / f"pa{r}")),
    }
    pushes: dict[str, Callable[[int], object]] = {
        f"python -m storage.sync push --workers {n}": lambda r: cli(
            "push", f"tc{r}", work / "tools-src"
        ),
        "storage.sync.push() in process": lambda r: check(
            push(config, volume(f"tp{r}"), source, workers=transfers)
        ),
        f"rclone copy --transfers {n}": lambda r: run(
            *rclone, str(source), f"bench:{BUCKET}/tr{r}"
        ),
        "aws s3 sync": lambda r: run(*aws, str(source), f"s3://{BUCKET}/ta{r}"),
    }
    print(f"\n{count} files of {size} bytes, {rounds} rounds, load {os.getloadavg()[0]:.2f}")
    for what, tools in (("pull", pulls), ("push", pushes)):
        if only in (None, what):
            alternate(what, tools, rounds)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def alternate(what: str, tools: dict[str, Callable[[int], object]], rounds: int) -> None:
    """Each tool once per round, in turn; per tool the median, p95, its rounds and the CPU
    its command used (children's user + system time; 0 for the in-process call's threads,
    which count as this process)."""
    times: dict[str, list[float]] = {name: [] for name in tools}
    cpu: dict[str, list[float]] = {name: [] for name in tools}
    for round_ in range(rounds):
        for name, action in tools.items():
            before = os.times()
            times[name].append(timed(action, round_))
            after = os.times()
            spent = after.children_user + after.children_system
            spent -= before.children_user + before.children_system
            if "in process" in name:
                spent = after.user + after.system - before.user - before.system
            cpu[name].append(spent)
    best_tool = min(statistics.median(times[n]) for n in tools if "sync" not in n)
    for name, measured in times.items():
        median, worst = statistics.median(measured), p95(measured)
        every = " ".join(f"{t:.2f}" for t in measured)
        print(
            f"{what}: {name:<36} median {median:6.2f} s x{median / best_tool:4.2f}  "
            f"p95 {worst:6.2f} s  cpu {statistics.median(cpu[name]):5.2f} s  ({every})"
        )


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-files", type=int, default=1000)
    parser.add_argument("--small-size", type=int, default=16 * 1024)
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--tools", action="store_true", help="compare with rclone and aws")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --tools")
    parser.add_argument("--transfers", type=int, default=16, help="--tools: rclone and sync")
    parser.add_argument("--only", choices=("pull", "push"), help="--tools: one direction")
    args = parser.parse_args()
    if args.tools and "--small-size" not in sys.argv:
        args.small_size = 2048
    print(f"storage benchmark: {os.cpu_count()} CPUs, embedded s3rver on loopback")
    with tempfile.TemporaryDirectory(prefix="ajuste-bench-") as temporary:
        work = Path(temporary)
        with start_embedded_s3(directory=work / "s3", log_path=work / "s3rver.log") as server:
            config = server.config()
            create_bucket(config, bucket=BUCKET)
            if args.tools:
                tools_case(
                    config,
                    work,
                    args.small_files,
                    args.small_size,
                    args.rounds,
                    args.transfers,
                    args.only,
                )
                return
            small_files_case(config, work, args.small_files, args.small_size, args.workers)
            big_file_case(config, work, args.big_mib, args.workers)


if __name__ == "__main__":
    main()
