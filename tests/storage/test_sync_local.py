"""The local side of the sync: safe paths, the scan, ETag arithmetic."""

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from storage.objects import ObjectInfo
from storage.sync.local import (
    HashCache,
    UnsafeKeyError,
    candidate_part_sizes,
    local_path,
    same_content,
    scan,
)

MiB = 1024 * 1024


def md5(data: bytes) -> "hashlib._Hash":
    return hashlib.md5(data, usedforsecurity=False)


def obj(size: int, etag: str) -> ObjectInfo:
    return ObjectInfo(key="k", size=size, last_modified=datetime.now(UTC), etag=etag)


@pytest.mark.parametrize("relative", ["a", "a/b c/ü.txt", "..a", "a..", "<script>"])
def test_safe_keys_map_under_the_root(tmp_path: Path, relative: str) -> None:
    path = local_path(tmp_path, relative)
    assert path.is_relative_to(tmp_path)
    assert path == tmp_path.joinpath(*relative.split("/"))


@pytest.mark.parametrize(
    "relative", ["../x", "a/../../x", "a//b", "./a", "a/.", "", "/abs", "a\0b"]
)
def test_unsafe_keys_are_refused(tmp_path: Path, relative: str) -> None:
    with pytest.raises(UnsafeKeyError):
        local_path(tmp_path, relative)


def test_symlinked_folders_cannot_lead_outside(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root/out").symlink_to(tmp_path)
    (tmp_path / "root/in").symlink_to(tmp_path / "root")
    with pytest.raises(UnsafeKeyError, match="resolves outside"):
        local_path(tmp_path / "root", "out/x")
    assert local_path(tmp_path / "root", "in/x") == tmp_path / "root/in/x"


def test_scan_sees_files_dirs_and_symlinks(tmp_path: Path) -> None:
    (tmp_path / "d/e").mkdir(parents=True)
    (tmp_path / "d/e/f.txt").write_bytes(b"f")
    (tmp_path / "g").write_bytes(b"g")
    (tmp_path / "link").symlink_to(tmp_path / "g")
    (tmp_path / ".ajuste-123.partial").write_bytes(b"tmp")
    os.mkfifo(tmp_path / "fifo")
    result = scan(tmp_path)
    assert sorted(result.files) == ["d/e/f.txt", "g"]
    assert result.dirs == {"d", "d/e"}
    assert result.symlinks == ["link"]
    assert result.errors == []


def test_scan_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    assert [failure.key for failure in scan(tmp_path / "nope").errors] == ["."]


def test_plain_md5_etags_compare_content(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    info = path.stat()
    hashes = HashCache()
    assert same_content(path, info, obj(5, md5(b"hello").hexdigest()), hashes) is True
    assert same_content(path, info, obj(5, md5(b"HELLO").hexdigest()), hashes) is False
    assert same_content(path, info, obj(6, md5(b"hello").hexdigest()), hashes) is False
    assert same_content(path, info, obj(5, "not-an-md5"), hashes) is None


def test_multipart_etags_are_reproduced(tmp_path: Path) -> None:
    data = os.urandom(12 * MiB + 7)
    path = tmp_path / "big"
    path.write_bytes(data)
    parts = [data[i : i + 5 * MiB] for i in range(0, len(data), 5 * MiB)]
    etag = md5(b"".join(md5(part).digest() for part in parts)).hexdigest() + "-3"
    hashes = HashCache()
    assert candidate_part_sizes(len(data), 3) == [5 * MiB]
    assert same_content(path, path.stat(), obj(len(data), etag), hashes) is True
    # 2 parts: ours (16 MiB) would give 1, 8 MiB gives 2 -> checked, and it differs -> unknown
    other = md5(b"x").hexdigest() + "-2"
    assert same_content(path, path.stat(), obj(len(data), other), hashes) is None
    # 9 parts matches no uploader we know: dates will decide
    assert same_content(path, path.stat(), obj(len(data), other[:-2] + "-9"), hashes) is None


def test_hashes_are_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    hashes = HashCache()
    first = hashes.etag(path, path.stat())
    path.write_bytes(b"two")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    assert hashes.etag(path, path.stat()) != first
    assert first == md5(b"one").hexdigest()
