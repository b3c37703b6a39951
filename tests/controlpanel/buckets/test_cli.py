"""The `ajuste` CLI against a live panel (pytest-django's live_server) and the real S3
server, with a real API token: buckets, objects, transfers, errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from controlpanel.accounts.services import token_create
from controlpanel.cli import transfers
from controlpanel.cli.main import cli
from storage import objects
from storage.datastore import DatastoreConfig

live = pytest.mark.django_db(transaction=True)  # the CLI talks HTTP to a live server
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def run(live_server: Any, owner: Any, datastore: DatastoreConfig, eager_tasks: None) -> Any:
    """Invoke `ajuste ...` as the owner of project alpha."""
    _, token = token_create(user=owner, name="cli")
    env = {"AJUSTE_URL": live_server.url, "AJUSTE_TOKEN": token, "AJUSTE_PROJECT": "alpha"}

    def invoke(*args: str, input: str | None = None, **extra: str) -> Result:
        return CliRunner().invoke(cli, list(args), env=env | extra, input=input)

    return invoke


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def _json(result: Result) -> Any:
    return json.loads(_ok(result).stdout)


@live
def test_bucket_create_list_and_delete(run: Any, name: str, datastore: DatastoreConfig) -> None:
    created = _json(run("bucket", "create", name, "-o", "json"))
    assert (created["name"], created["datastore"], created["origin"]) == (name, "LOCAL", "created")
    table = _ok(run("bucket", "list")).stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "DATASTORE", "OBJECTS"]
    assert table[1].split()[:4] == [name, "LOCAL", "0", "0"]
    listed = _json(run("-o", "json", "bucket", "list"))
    assert [b["name"] for b in listed] == [name]
    assert _ok(run("bucket", "delete", name)).stdout.strip() == f"deleted {name}"
    assert not objects.bucket_exists(datastore, bucket=name)


@live
def test_upload_list_download_and_delete_files_and_folders(
    run: Any, name: str, tmp_path: Path, datastore: DatastoreConfig
) -> None:
    _ok(run("bucket", "create", f"{name}@LOCAL"))
    tree = tmp_path / "corpus"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha")
    (tree / "sub" / "ü b.txt").write_text("beta")
    single = tmp_path / "notes.md"
    single.write_text("# notes")
    uploaded = _json(
        run("bucket", "object", "upload", f"{name}/data", str(tree), str(single), "-o", "json")
    )
    assert sorted(item["key"] for item in uploaded) == [
        "data/corpus/a.txt",
        "data/corpus/sub/ü b.txt",
        "data/notes.md",
    ]
    listing = _json(run("bucket", "object", "list", f"{name}/data/", "-o", "json"))
    assert listing["prefixes"] == ["data/corpus/"]
    assert [o["key"] for o in listing["objects"]] == ["data/notes.md"]
    flat = _ok(run("bucket", "object", "list", f"{name}/data/corpus/", "-r")).stdout
    assert "data/corpus/sub/ü b.txt" in flat and "DIR" not in flat
    one = tmp_path / "one.txt"
    _ok(run("bucket", "object", "download", f"{name}/data/corpus/a.txt", str(one)))
    assert one.read_text() == "alpha"
    out = tmp_path / "out"
    _ok(run("bucket", "object", "download", f"{name}/data/corpus/", str(out), "-r"))
    assert (out / "sub" / "ü b.txt").read_text() == "beta" and (out / "a.txt").exists()
    named = tmp_path / "named"  # a folder named without '/' or -r is still a folder
    _ok(run("bucket", "object", "download", f"{name}/data/corpus", str(named)))
    assert sorted(p.relative_to(named).as_posix() for p in named.rglob("*.txt")) == [
        "a.txt",
        "sub/ü b.txt",
    ]
    deleted = _json(run("bucket", "object", "delete", f"{name}/data/corpus/", "-r", "-o", "json"))
    assert sorted(deleted["deleted"]) == ["data/corpus/a.txt", "data/corpus/sub/ü b.txt"]
    assert [o.key for o in objects.iter_objects(datastore, bucket=name)] == ["data/notes.md"]
    counted = _json(run("bucket", "list", "-o", "json"))[0]
    assert (counted["object_count"], counted["total_size"]) == (1, 7)


@live
def test_recursive_delete_and_download_take_the_folder_only(
    run: Any, name: str, tmp_path: Path, datastore: DatastoreConfig
) -> None:
    """`runs/1` with -r is the folder runs/1/: never runs/10/... nor runs/1-old.txt."""
    _ok(run("bucket", "create", name))
    keys = ["runs/1/a", "runs/1/b/c", "runs/10/x", "runs/1-old.txt", "runs/1"]
    for key in keys:
        objects.put_object(datastore, bucket=name, key=key, data=key.encode())
    out = tmp_path / "out"
    _ok(run("bucket", "object", "download", f"{name}/runs/1", str(out), "-r"))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "a",
        "b/c",
    ]
    deleted = _json(run("bucket", "object", "delete", f"{name}/runs/1", "-r", "-o", "json"))
    assert sorted(deleted["deleted"]) == ["runs/1/a", "runs/1/b/c"]
    left = sorted(o.key for o in objects.iter_objects(datastore, bucket=name))
    assert left == ["runs/1", "runs/1-old.txt", "runs/10/x"]
    again = _ok(run("bucket", "object", "delete", f"{name}/runs/1", "-r"))
    assert "nothing under 'runs/1/'" in again.stderr and "deleted 0 object(s)" in again.stdout
    assert len(list(objects.iter_objects(datastore, bucket=name))) == 3


@live
def test_multipart_upload_of_a_big_file(
    run: Any, name: str, tmp_path: Path, datastore: DatastoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfers, "SINGLE_PUT_MAX", 1024 * 1024)
    monkeypatch.setattr(transfers, "PART_SIZE", 5 * 1024 * 1024)
    big = tmp_path / "big.bin"
    data = os.urandom(11 * 1024 * 1024 + 7)
    big.write_bytes(data)
    _ok(run("bucket", "create", name))
    _ok(run("bucket", "object", "upload", name, str(big)))
    assert objects.read_object(datastore, bucket=name, key="big.bin", max_bytes=len(data)) == data
    back = tmp_path / "back.bin"
    _ok(run("bucket", "object", "download", f"{name}/big.bin", str(back)))
    assert back.read_bytes() == data


@live
def test_deleting_a_non_empty_bucket_needs_empty(
    run: Any, name: str, datastore: DatastoreConfig
) -> None:
    _ok(run("bucket", "create", name))
    objects.put_object(datastore, bucket=name, key="x", data=b"1")
    refused = run("bucket", "delete", name)
    assert refused.exit_code == 1
    assert f"HTTP 409: {name} is not empty" in refused.stderr
    declined = run("bucket", "delete", name, "--empty", input="n\n")
    assert declined.exit_code == 1 and objects.bucket_exists(datastore, bucket=name)
    _ok(run("bucket", "delete", name, "--empty", "--yes"))
    assert not objects.bucket_exists(datastore, bucket=name)


ERRORS = [
    (("bucket", "list"), {"AJUSTE_TOKEN": ""}, 2, "No API token: set AJUSTE_TOKEN"),
    (
        ("bucket", "list"),
        {"AJUSTE_TOKEN": "ajt_wrong"},
        1,
        "HTTP 401: Invalid, expired or revoked token.",
    ),
    (("bucket", "list"), {"AJUSTE_PROJECT": "beta"}, 1, "HTTP 404: No such project."),
    (
        ("bucket", "create", "Bad_Name"),
        {},
        1,
        "HTTP 400: name: uppercase letter 'B' at position 0: bucket names are lowercase",
    ),
    (
        ("bucket", "object", "list", "missing-bucket"),
        {},
        1,
        "your project has no bucket named missing-bucket",
    ),
    (("bucket", "object", "list", "@LOCAL"), {}, 2, "names no bucket"),
    (("bucket", "object", "upload", "b", "/nonexistent/file"), {}, 2, "does not exist"),
    (
        ("bucket", "list"),
        {"AJUSTE_URL": "http://127.0.0.1:9"},
        1,
        "cannot reach http://127.0.0.1:9",
    ),
]


@live
def test_errors_are_clear_with_a_non_zero_exit(run: Any) -> None:
    for args, extra, code, text in ERRORS:  # one live server session for all of them
        result = run(*args, **extra)
        assert result.exit_code == code, (args, result.output)
        assert text in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.output


def test_the_cli_imports_no_django() -> None:
    check = (
        "import sys, controlpanel.cli.main, controlpanel.cli.buckets; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'boto3')]; "
        "print(bad)"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a/b.txt", "a/b.txt"),
        ("../x", None),
        ("a/../../x", None),
        ("/abs", None),
        ("a//b", None),
        ("./a", None),
        ("C:/Windows/x", None),  # Windows: a drive, whatever the target folder
        ("a/C:evil.txt", None),  # drive-relative: C:'s current folder, not a/
        ("a/file.txt:stream", None),  # an NTFS alternate data stream
        ("ok name ü", "ok name ü"),
    ],
)
def test_downloads_never_escape_the_target_folder(
    tmp_path: Path, key: str, expected: str | None
) -> None:
    found = transfers.local_path(tmp_path, key)
    assert (found.relative_to(tmp_path).as_posix() if found else None) == expected
