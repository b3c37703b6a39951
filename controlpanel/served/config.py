"""What an app serves and how, as its row keeps it (`params`), and where it is served: the
panel's pages, its API, its driver and its proxy read these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlpanel.served.states import AppState as A
from controlpanel.usercontent.hosts import content_host
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, Scaling

WEIGHT_PATHS = (APP_MODEL_PATH, APP_ADAPTER_PATH)


# States in which an app's server may answer (the gateway and the local proxy let calls in).
SERVING = frozenset({A.RUNNING, A.SCALING})


@dataclass(frozen=True)
class Serving:
    """What an app serves and how, as stored in its `params`."""

    model: str
    adapter: str
    model_name: str
    probe_path: str
    port: int
    scaling: Scaling
    public: bool

    @classmethod
    def of(cls, app: Any) -> Serving:
        p = app.params
        s = p.get("scaling") or {}
        return cls(
            model=str(p.get("model", "")),
            adapter=str(p.get("adapter", "")),
            model_name=str(p.get("model_name", "")),
            probe_path=str(p.get("probe_path", "/health")),
            port=int(p.get("port", 8000)),
            scaling=Scaling(
                min_replicas=int(s.get("min_replicas", 1)),
                max_replicas=int(s.get("max_replicas", 1)),
                target_cpu=s.get("target_cpu"),
                target_rps=s.get("target_rps"),
            ),
            public=bool(p.get("public", False)),
        )

    @property
    def scaling_mode(self) -> str:
        if self.scaling.target_cpu is not None:
            return "cpu"
        return "rps" if self.scaling.target_rps is not None else "fixed"


def app_path(app: Any) -> str:
    """Where the app is served on its own host: the root (its API under `/v1`)."""
    return "/"


def app_url(app: Any) -> str:
    """The OpenAI base URL of the app (what `openai.OpenAI(base_url=...)` takes), on the app's
    own host under USER_CONTENT_DOMAIN, on a cluster and under `make run` alike."""
    from controlpanel.served.usercontent import SERVED  # it reads this module

    return f"{content_host(SERVED.prefix, app.pk).origin}{app_path(app)}v1"


def user_volumes(app: Any) -> list[str]:
    """The volumes the user added (the weights' are shown as `model` and `adapter`)."""
    return [v for v in app.volumes if v.rsplit(":", 2)[1] not in WEIGHT_PATHS]


def replicas(app: Any) -> tuple[int, int]:
    """(ready, wanted) as last observed."""
    ready, wanted = (app.progress or {}).get("replicas") or (0, 0)
    return int(ready), int(wanted)
