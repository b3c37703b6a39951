"""What a local app runs: the model server of this machine's own Python
(`python -P -m deploy.local.serve`, standing in for the serving image) on a loopback port,
reading the weights the supervisor pulled under /workspace. Decided here, executed by the
supervisor like any run; the panel's proxy is the only way in from outside."""

from __future__ import annotations

from typing import Any

from deploy import images
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, AppRequest

# How long the server has to answer its probe once started (loading weights on CPU).
APP_READY_S = 300


def app_problem(app: AppRequest) -> str | None:
    """Why this app cannot run on the local backend, or None. Like jobs, only the built-in
    image runs here (its own command): anything else would run as the panel's OS user."""
    from deploy.local.plan import UNSAFE_ENV

    if app.image != images.SERVING_IMAGE or app.command is not None:
        return (
            f"the image {app.image} needs the Kubernetes backend (COMPUTE_BACKEND=kubernetes); "
            f"the local backend serves only the built-in serving image {images.SERVING_IMAGE}"
        )
    unsafe = sorted(name for name in {**app.env, **app.secret_env} if UNSAFE_ENV.match(name))
    if unsafe:
        return f"the local backend does not let an app set {', '.join(unsafe)}"
    return None


def app_argv(app: AppRequest, *, python: str, port: int) -> list[str]:
    """The server on 127.0.0.1:`port` (paths under /workspace are rewritten by the plan)."""
    argv = [python, "-P", "-m", "deploy.local.serve", "--model", APP_MODEL_PATH]
    if app.adapter is not None:
        argv += ["--adapter", APP_ADAPTER_PATH]
    return [*argv, "--name", app.served_name, "--host", "127.0.0.1", "--port", str(port)]


def app_probe(app: AppRequest, *, port: int) -> dict[str, Any]:
    """RUNNING once the server answers its probe path (it loads the weights first)."""
    return {"health": f"http://127.0.0.1:{port}{app.probe_path}", "ready_s": APP_READY_S}
