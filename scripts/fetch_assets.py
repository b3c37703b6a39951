"""Fetch the browser assets the panel serves (package.json's `served`: htmx, Chart.js) from the
npm registry into node_modules/<package>/, at the versions and integrity hashes
package-lock.json records.

The panel image uses this instead of a Node.js stage: it needs a few files of a few packages,
not a Node toolchain (and not s3rver, which only `make run` and the tests use).

    python scripts/fetch_assets.py [--registry URL] [--dest DIR]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def served_by_package(package_json: dict) -> dict[str, set[str]]:
    """package.json's `served` files (controlpanel/core/staticfinders.py) by npm package."""
    files: dict[str, set[str]] = {}
    for url_path, source in package_json["served"].items():
        if url_path == "//":
            continue
        parts = source.split("/")
        cut = 2 if source.startswith("@") else 1  # a scoped package's name has two parts
        files.setdefault("/".join(parts[:cut]), set()).add("/".join(parts[cut:]))
    return files


def _verified(data: bytes, integrity: str) -> bytes:
    algorithm, _, expected = integrity.partition("-")
    digest = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if digest != expected:
        raise SystemExit(f"integrity mismatch: {integrity} != {algorithm}-{digest}")
    return data


def fetch(package: str, wanted: set[str], *, lock: dict, registry: str, dest: Path) -> int:
    """Download, verify and unpack the `wanted` files of `package`; return how many."""
    entry = lock["packages"][f"node_modules/{package}"]
    version = entry["version"]
    url = f"{registry}/{package}/-/{package.rsplit('/', 1)[-1]}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 (https registry)
        data = _verified(answer.read(), entry["integrity"])
    written = 0
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            relative = member.name.removeprefix("package/")
            if not member.isfile() or relative not in wanted:
                continue
            target = dest / package / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
            written += 1
    if written != len(wanted):
        raise SystemExit(f"{package}@{version} lacks some of {sorted(wanted)}")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default="https://registry.npmjs.org")
    parser.add_argument("--dest", type=Path, default=ROOT / "node_modules")
    args = parser.parse_args()
    lock = json.loads((ROOT / "package-lock.json").read_text())
    served = served_by_package(json.loads((ROOT / "package.json").read_text()))
    for package, wanted in served.items():
        count = fetch(package, wanted, lock=lock, registry=args.registry, dest=args.dest)
        print(f"{package}: {count} files")


if __name__ == "__main__":
    main()
