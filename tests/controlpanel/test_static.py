"""What `collectstatic` (each `make run`, each image build) puts in STATIC_ROOT from npm packages:
the files the pages load, not the packages' whole dist folders."""

from __future__ import annotations

import base64
import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import override_settings

from controlpanel.core.staticfinders import vendor_files

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = {"staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}}


def test_every_vendor_file_a_template_loads_is_found_and_nothing_else_of_the_packages() -> None:
    loaded = set()
    for template in (ROOT / "templates").rglob("*.html"):
        loaded |= set(re.findall(r"{% static '(vendor/[^']+)' %}", template.read_text()))
    assert loaded, "no template loads a vendor file: the pattern is stale"
    assert loaded <= set(vendor_files())
    for path in vendor_files():
        assert Path(finders.find(path)).is_file(), path
    assert finders.find("vendor/chartjs/chart.js") is None
    assert finders.find("vendor/htmx/htmx.esm.js") is None


def test_collectstatic_copies_hashes_and_compresses_only_what_is_served(tmp_path: Path) -> None:
    root = tmp_path / "static"
    with override_settings(STATIC_ROOT=root, STORAGES=MANIFEST | {"default": {}}):
        call_command("collectstatic", "--noinput", "-v", "0")
    vendor = sorted(
        p.relative_to(root).as_posix() for p in (root / "vendor").rglob("*") if p.is_file()
    )
    assert "vendor/chartjs/chart.js" not in vendor and "vendor/htmx/htmx.js" not in vendor
    hashed = [p for p in vendor if re.search(r"chart\.umd\.min\.[0-9a-f]{12}\.js$", p)]
    assert len(hashed) == 1, vendor
    # The minified build points at its hashed source map, which is served as it is.
    assert re.search(
        r"sourceMappingURL=chart\.umd\.min\.js\.[0-9a-f]{12}\.map", (root / hashed[0]).read_text()
    )
    assert f"{hashed[0]}.br" in vendor and f"{hashed[0]}.gz" in vendor
    assert not [p for p in vendor if p.endswith((".map.gz", ".map.br"))], vendor
    # 3 files, each as it is and hashed (6); the 4 copies of the 2 scripts, in brotli and gzip (8).
    assert len(vendor) == 14, vendor


def _npm_cache_tarball(integrity: str) -> bytes:
    """A package's tarball as `npm ci` left it in npm's content-addressed cache (offline)."""
    algorithm, _, digest = integrity.partition("-")
    hexdigest = base64.b64decode(digest).hex()
    cache = Path.home() / ".npm" / "_cacache" / "content-v2" / algorithm
    return (cache / hexdigest[:2] / hexdigest[2:4] / hexdigest[4:]).read_bytes()


def test_fetch_assets_fetches_exactly_the_served_files_verified(tmp_path: Path) -> None:
    """The panel image's step: from a registry (here a loopback one serving npm's own tarballs)
    it writes the served files, byte for byte those `npm ci` installed, and nothing else."""
    lock = json.loads((ROOT / "package-lock.json").read_text())["packages"]

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            package = self.path.split("/-/")[0].lstrip("/")
            body = _npm_cache_tarball(lock[f"node_modules/{package}"]["integrity"])
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        registry = f"http://127.0.0.1:{server.server_address[1]}"
        done = subprocess.run(
            [sys.executable, "scripts/fetch_assets.py", "--registry", registry, "--dest", tmp_path],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(vendor_files().values())
    for source in written:
        assert (tmp_path / source).read_bytes() == (ROOT / "node_modules" / source).read_bytes()
