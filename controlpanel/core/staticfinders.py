"""The few files the pages load from npm packages, found in node_modules/ one by one.

package.json's `served` names them (URL path under STATIC_URL -> file under node_modules/);
scripts/fetch_assets.py fetches the same files for the panel image. A package's whole `dist/`
folder (chart.js ships 100 files and 6 MiB of builds, typings and source maps) would be copied,
hashed and compressed by every `collectstatic` for nothing. A minified build's source map is
listed with it: the manifest storage rewrites its `sourceMappingURL` and fails on a missing one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal, overload

from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage


@cache
def vendor_files() -> dict[str, str]:
    served = json.loads((Path(settings.BASE_DIR) / "package.json").read_text())["served"]
    return {path: source for path, source in served.items() if path != "//"}


class VendorFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.root = Path(settings.BASE_DIR) / "node_modules"

    @overload
    def find(self, path: str, find_all: Literal[False] = False) -> str | None: ...
    @overload
    def find(self, path: str, find_all: Literal[True]) -> list[str]: ...
    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str] | None:
        source = vendor_files().get(path)
        found = str(self.root / source) if source and (self.root / source).is_file() else None
        if find_all:
            return [found] if found else []
        return found or []  # what Django's own finders answer for "not here" (its stubs say None)

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        for path, source in vendor_files().items():
            folder = path.rsplit("/", 1)[0]
            storage = FileSystemStorage(location=(self.root / source).parent)
            # The prefix collectstatic puts before the file's name, as FileSystemFinder sets it.
            storage.prefix = folder  # type: ignore[attr-defined]
            yield Path(source).name, storage
