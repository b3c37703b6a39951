"""The embedded object store for `make run` and the tests: s3rver (npm) on loopback.

`start_embedded_s3()` starts `node storage/s3rver/main.js` (s3rver from node_modules with
Ajuste's fixes, see that file), waits until it answers and returns a handle to stop it. Data
lives in plain files under `directory`, so it survives restarts. Every bucket, including ones
created later, allows browser uploads (PUT/GET/HEAD, ETag exposed) from `cors_origins`.

`python -m storage.embedded --directory var/s3 --port 9000` runs it in the foreground.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from storage.datastore import DatastoreConfig

LAUNCHER = Path(__file__).with_name("s3rver") / "main.js"
DEFAULT_NODE_MODULES = Path(__file__).resolve().parent.parent / "node_modules"
DEFAULT_ACCESS_KEY = "ajuste-local"
DEFAULT_SECRET_KEY = "ajuste-local-secret"  # noqa: S105 - loopback-only dev store
DEFAULT_REGION = "us-east-1"


class EmbeddedS3Error(RuntimeError):
    """The embedded store could not start (node or s3rver missing, port taken, ...)."""


@dataclass
class EmbeddedS3:
    """A running embedded S3 server; `stop()` (or leaving a `with` block) ends it."""

    endpoint_url: str
    directory: Path
    access_key: str
    secret_key: str = field(repr=False)
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def port(self) -> int:
        return int(self.endpoint_url.rsplit(":", 1)[1])

    def config(self, *, alias: str = "LOCAL", region: str = DEFAULT_REGION) -> DatastoreConfig:
        """The datastore that points at this server."""
        return DatastoreConfig(
            alias=alias,
            endpoint_url=self.endpoint_url,
            region=region,
            access_key=self.access_key,
            secret_key=self.secret_key,
        )

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout:
            self.process.stdout.close()

    def __enter__(self) -> EmbeddedS3:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_embedded_s3(
    *,
    directory: Path,
    port: int = 0,
    host: str = "127.0.0.1",
    access_key: str = DEFAULT_ACCESS_KEY,
    secret_key: str = DEFAULT_SECRET_KEY,
    cors_origins: Sequence[str] = ("*",),
    node_modules: Path = DEFAULT_NODE_MODULES,
    log_path: Path | None = None,
    verbose: bool = False,
    timeout: float = 30.0,
) -> EmbeddedS3:
    """Start s3rver on `host:port` (0 picks a free port) over `directory`; return once it
    answers HTTP. Errors (and every request when `verbose`) are logged to `log_path`."""
    command = _command(directory, host, port, cors_origins, node_modules)
    env = dict(os.environ, AJUSTE_S3_ACCESS_KEY=access_key, AJUSTE_S3_SECRET_KEY=secret_key)
    env["AJUSTE_S3_VERBOSE"] = "1" if verbose else "0"
    process = _spawn(command, env, log_path)
    try:
        bound_port = _wait_listening(process, timeout)
        _wait_answering(host, bound_port, timeout)
    except EmbeddedS3Error as error:
        _kill(process)
        raise EmbeddedS3Error(f"{error}{_log_tail(log_path)}") from None
    except BaseException:
        _kill(process)
        raise
    return EmbeddedS3(
        endpoint_url=f"http://{host}:{bound_port}",
        directory=directory,
        access_key=access_key,
        secret_key=secret_key,
        process=process,
    )


def _spawn(
    command: list[str], env: dict[str, str], log_path: Path | None
) -> subprocess.Popen[bytes]:
    """Start the launcher: stdout is ours (its port), stderr goes to the log or nowhere. In a
    session of its own: a Ctrl-C in the terminal reaches its owner, which stops it last (the
    local runs' final pushes still need it), and a process group to stop after a crash."""
    if log_path is None:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    with open(log_path, "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True
        )


def _kill(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()
    if process.stdout:
        process.stdout.close()


def _log_tail(log_path: Path | None) -> str:
    if log_path is None:
        return "; pass log_path to see why"
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return ":\n" + "\n".join(lines[-8:]) if lines else ""


def _command(
    directory: Path, host: str, port: int, cors_origins: Sequence[str], node_modules: Path
) -> list[str]:
    node = shutil.which("node")
    if node is None:
        raise EmbeddedS3Error("node is not on PATH: the embedded object store needs node >= 18")
    if not (node_modules / "s3rver" / "package.json").exists():
        raise EmbeddedS3Error(f"s3rver is not installed in {node_modules} (run `npm ci`)")
    directory.mkdir(parents=True, exist_ok=True)
    return [node, str(LAUNCHER), str(node_modules), str(directory), host, str(port), *cors_origins]


def _wait_listening(process: subprocess.Popen[bytes], timeout: float) -> int:
    """Read the launcher's {"event": "listening", "port": N} line."""
    stdout: IO[bytes] | None = process.stdout
    assert stdout is not None
    ready, _, _ = select.select([stdout], [], [], timeout)
    if not ready:
        raise EmbeddedS3Error(f"embedded S3 did not report its port within {timeout:.0f} s")
    line = stdout.readline()
    if not line:  # end of output: the launcher exited (port taken, bad directory, ...)
        code = process.wait(timeout)
        raise EmbeddedS3Error(f"embedded S3 did not start (exit code {code})")
    return int(json.loads(line)["port"])


def _wait_answering(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = http.client.HTTPConnection(host, port, timeout=2)
            connection.request("GET", "/")
            connection.getresponse().read()  # 403 without credentials: it answers
            connection.close()
            return
        except OSError as error:
            if time.monotonic() > deadline:
                raise EmbeddedS3Error(f"embedded S3 on port {port} does not answer") from error
            time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the embedded store in the foreground until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m storage.embedded", description=__doc__)
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--access-key", default=os.environ.get("S3_ACCESS_KEY", DEFAULT_ACCESS_KEY))
    parser.add_argument("--cors-origin", action="append", dest="cors_origins")
    parser.add_argument("--log", type=Path, default=None, help="error log (and requests: -v)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    server = start_embedded_s3(
        directory=args.directory,
        port=args.port,
        host=args.host,
        access_key=args.access_key,
        secret_key=os.environ.get("S3_SECRET_KEY", DEFAULT_SECRET_KEY),
        cors_origins=args.cors_origins or ["*"],
        log_path=args.log,
        verbose=args.verbose,
    )
    print(f"embedded S3 on {server.endpoint_url} (data in {args.directory})", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        return server.process.wait()
    except KeyboardInterrupt:
        server.stop()
        return 0


if __name__ == "__main__":
    sys.exit(main())
