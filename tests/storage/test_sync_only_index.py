"""`python -m storage.sync push --only-index I` (issue 29): a multi-node job's rw volumes are
pushed from node 0 only; every other node's push (its sidecar too) writes nothing."""

import threading
from pathlib import Path

import pytest

from storage.datastore import DatastoreConfig
from storage.objects import iter_objects
from storage.sync.cli import EXIT_OK, EXIT_USAGE, main
from tests.fixtures.s3 import each_s3_server


@pytest.fixture(params=["moto"])
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def pushed(config: DatastoreConfig, bucket: str) -> list[str]:
    return [info.key for info in iter_objects(config, bucket=bucket)]


def test_only_node_zero_pushes(s3_server: DatastoreConfig, bucket: str, tmp_path: Path) -> None:
    output = f"{bucket}@LOCAL/output:/workspace/output:rw"
    (tmp_path / "workspace/output").mkdir(parents=True)
    (tmp_path / "workspace/output/adapter.bin").write_bytes(b"weights")
    args = ["push", output, "--root", str(tmp_path), "--only-index", "0"]
    other = s3_server.to_env() | {"JOB_COMPLETION_INDEX": "1"}
    assert main(args, environ=other) == EXIT_OK
    assert pushed(s3_server, bucket) == []
    stop = threading.Event()
    stop.set()  # the pod's SIGTERM: the idle sidecar ends, still without a push
    assert main([*args, "--every", "5"], environ=other, stop=stop) == EXIT_OK
    assert pushed(s3_server, bucket) == []
    zero = s3_server.to_env() | {"JOB_COMPLETION_INDEX": "0"}
    assert main(args, environ=zero) == EXIT_OK
    assert pushed(s3_server, bucket) == ["output/adapter.bin"]


def test_only_index_is_a_push_option(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    spec = f"{bucket}@LOCAL/data:/workspace/data:ro"
    args = ["pull", spec, "--root", str(tmp_path), "--only-index", "0"]
    assert main(args, environ=s3_server.to_env()) == EXIT_USAGE
