"""A datastore: a named S3 endpoint with credentials, referred to by its alias (`GRA`, `LOCAL`).

Credentials reach a workload in one of two shapes, both read by `DatastoreConfig.from_env`:

- files (pods, and the local backend's sync processes): `AJUSTE_DATASTORE_DIR` names a
  directory holding `<ALIAS>.endpoint_url`, `<ALIAS>.region`, `<ALIAS>.access_key`,
  `<ALIAS>.secret_key` and, for temporary credentials, `<ALIAS>.session_token` — the project
  Secret mounted as a volume into the sync containers only (`to_files`). Files are read anew
  on every call, so credentials refreshed in the Secret reach a long-running sidecar.
- environment variables `AJUSTE_DATASTORE_<ALIAS>_*` (`to_env`): a host-side CLI run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The variable naming the credential directory, and where pods mount it.
DIR_VARIABLE = "AJUSTE_DATASTORE_DIR"
POD_DIR = "/var/run/ajuste/datastores"
FILE_FIELDS = ("endpoint_url", "region", "access_key", "secret_key", "session_token")
# A credential file is a few hundred bytes; refuse to read anything bigger.
MAX_FILE_BYTES = 8192


def alias_key(alias: str) -> str:
    """The alias as it appears in variable and file names (`gra-2` -> `GRA_2`)."""
    return alias.upper().replace("-", "_")


def env_prefix(alias: str) -> str:
    """Environment-variable prefix that carries one datastore into a process."""
    return "AJUSTE_DATASTORE_" + alias_key(alias) + "_"


def file_name(alias: str, name: str) -> str:
    """The file (and project Secret key) holding one field of a datastore: `GRA.access_key`."""
    return f"{alias_key(alias)}.{name}"


@dataclass(frozen=True)
class DatastoreConfig:
    """Connection settings of one datastore; `secret_key` and `session_token` never appear in
    repr.

    `public_endpoint_url` is where browsers and host-side CLIs reach the store when that is
    not `endpoint_url` (the panel reaches `http://minio:9000`, a browser `http://localhost:9000`);
    presigned URLs are signed for it. Empty: the same as `endpoint_url`.

    `pod_endpoint_url` is where cluster pods reach the store when that is not `endpoint_url`
    (the panel under Compose reaches `http://minio:9000`, a name no pod resolves); it goes into
    pods' credential files (`to_files(pod=True)`). Empty: the same as `endpoint_url`.

    `session_token` is set for temporary credentials (STS); empty for long-lived keys."""

    alias: str
    endpoint_url: str
    region: str
    access_key: str
    secret_key: str = field(repr=False)
    public_endpoint_url: str = ""
    pod_endpoint_url: str = ""
    session_token: str = field(default="", repr=False)

    @property
    def presign_endpoint_url(self) -> str:
        """The endpoint presigned URLs point at."""
        return self.public_endpoint_url or self.endpoint_url

    @property
    def workload_endpoint_url(self) -> str:
        """The endpoint cluster pods use."""
        return self.pod_endpoint_url or self.endpoint_url

    def _fields(self, pod: bool) -> dict[str, str]:
        values = {
            "endpoint_url": self.workload_endpoint_url if pod else self.endpoint_url,
            "region": self.region,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
        }
        if self.session_token:
            values["session_token"] = self.session_token
        return values

    def to_env(self, *, pod: bool = False) -> dict[str, str]:
        """The `AJUSTE_DATASTORE_<ALIAS>_*` variables a host-side process reads (`from_env`);
        with `pod`, the endpoint pods use. Pods get files instead (`to_files`)."""
        prefix = env_prefix(self.alias)
        return {prefix + name.upper(): value for name, value in self._fields(pod).items()}

    def to_files(self, *, pod: bool = False) -> dict[str, str]:
        """The `<ALIAS>.<field>` files (and project Secret keys) `from_directory` reads."""
        return {file_name(self.alias, name): value for name, value in self._fields(pod).items()}

    @classmethod
    def from_env(cls, alias: str, environ: Mapping[str, str]) -> DatastoreConfig:
        """The datastore from the files under `$AJUSTE_DATASTORE_DIR` when that is set (pods),
        else from `AJUSTE_DATASTORE_<ALIAS>_*` variables. KeyError says what is missing."""
        directory = environ.get(DIR_VARIABLE)
        if directory:
            return cls.from_directory(alias, Path(directory))
        prefix = env_prefix(alias)
        values = {name: environ.get(prefix + name.upper(), "") for name in FILE_FIELDS}
        return cls._build(alias, values, [prefix + name.upper() for name in FILE_FIELDS])

    @classmethod
    def from_directory(cls, alias: str, directory: Path) -> DatastoreConfig:
        """The datastore from `<directory>/<ALIAS>.<field>` files (surrounding whitespace is
        dropped: a file written by hand often ends with a newline)."""
        values = {name: _read_small(directory / file_name(alias, name)) for name in FILE_FIELDS}
        where = [str(directory / file_name(alias, name)) for name in FILE_FIELDS]
        return cls._build(alias, values, where)

    @classmethod
    def _build(cls, alias: str, values: dict[str, str], where: list[str]) -> DatastoreConfig:
        required = ("endpoint_url", "access_key", "secret_key")
        missing = [
            w
            for name, w in zip(FILE_FIELDS, where, strict=True)
            if name in required and not values[name]
        ]
        if missing:
            raise KeyError(f"datastore {alias!r} is not configured: {', '.join(missing)} unset")
        return cls(
            alias=alias,
            endpoint_url=values["endpoint_url"],
            region=values["region"] or "us-east-1",
            access_key=values["access_key"],
            secret_key=values["secret_key"],
            session_token=values["session_token"],
        )


def _read_small(path: Path) -> str:
    """A credential file's text, "" when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    with os.fdopen(fd, "rb") as file:
        return file.read(MAX_FILE_BYTES).decode("utf-8", "replace").strip()
