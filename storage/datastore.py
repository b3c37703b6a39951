"""A datastore: a named S3 endpoint with credentials, referred to by its alias (`GRA`, `LOCAL`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def env_prefix(alias: str) -> str:
    """Environment-variable prefix that carries one datastore into a pod or a process."""
    return "AJUSTE_DATASTORE_" + alias.upper().replace("-", "_") + "_"


@dataclass(frozen=True)
class DatastoreConfig:
    """Connection settings of one datastore; `secret_key` never appears in repr.

    `public_endpoint_url` is where browsers and host-side CLIs reach the store when that is
    not `endpoint_url` (the panel reaches `http://minio:9000`, a browser `http://localhost:9000`);
    presigned URLs are signed for it. Empty: the same as `endpoint_url`.

    `pod_endpoint_url` is where cluster pods reach the store when that is not `endpoint_url`
    (the panel under Compose reaches `http://minio:9000`, a name no pod resolves); it goes into
    pods' environment (`to_env(pod=True)`). Empty: the same as `endpoint_url`."""

    alias: str
    endpoint_url: str
    region: str
    access_key: str
    secret_key: str = field(repr=False)
    public_endpoint_url: str = ""
    pod_endpoint_url: str = ""

    @property
    def presign_endpoint_url(self) -> str:
        """The endpoint presigned URLs point at."""
        return self.public_endpoint_url or self.endpoint_url

    @property
    def workload_endpoint_url(self) -> str:
        """The endpoint cluster pods use."""
        return self.pod_endpoint_url or self.endpoint_url

    def to_env(self, *, pod: bool = False) -> dict[str, str]:
        """The `AJUSTE_DATASTORE_<ALIAS>_*` variables a workload reads (`from_env`); with
        `pod`, for a cluster pod (its endpoint), else for a process beside the panel."""
        prefix = env_prefix(self.alias)
        return {
            prefix + "ENDPOINT_URL": self.workload_endpoint_url if pod else self.endpoint_url,
            prefix + "REGION": self.region,
            prefix + "ACCESS_KEY": self.access_key,
            prefix + "SECRET_KEY": self.secret_key,
        }

    @classmethod
    def from_env(cls, alias: str, environ: Mapping[str, str]) -> DatastoreConfig:
        prefix = env_prefix(alias)
        missing = [
            prefix + key
            for key in ("ENDPOINT_URL", "ACCESS_KEY", "SECRET_KEY")
            if not environ.get(prefix + key)
        ]
        if missing:
            raise KeyError(f"datastore {alias!r} is not configured: {', '.join(missing)} unset")
        return cls(
            alias=alias,
            endpoint_url=environ[prefix + "ENDPOINT_URL"],
            region=environ.get(prefix + "REGION") or "us-east-1",
            access_key=environ[prefix + "ACCESS_KEY"],
            secret_key=environ[prefix + "SECRET_KEY"],
        )
