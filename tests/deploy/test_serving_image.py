"""The serving image (images/serving/Dockerfile) against the app Deployment that runs it: the
Dockerfile is read as text (building it needs vLLM's CUDA wheels, many GB, and a GPU to run),
and the container deploy/manifests/apps.py builds must match its ENTRYPOINT, EXPOSE, USER,
health path and weight paths, so renaming one side breaks this test."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from deploy import images
from deploy.manifests import make_app_deployment
from deploy.manifests.apps import BASE_SUFFIX, server_args
from deploy.manifests.common import RUN_AS
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, AppRequest
from deploy.version import REGISTRY, VERSION
from tests.deploy.test_app_manifests import make_app_request

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "images" / "serving" / "Dockerfile"
BENCH = REPO / "bench" / "serving_gpu.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serving_gpu", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) of each instruction, continuation lines joined, comments left out."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and not pending.strip():
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def final_stage() -> list[tuple[str, str]]:
    steps = instructions(DOCKERFILE)
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def only(word: str) -> str:
    found = [rest for w, rest in final_stage() if w == word]
    assert len(found) == 1, (word, found)
    return found[0]


def labels() -> dict[str, str]:
    pairs: dict[str, str] = {}
    for word, rest in final_stage():
        if word == "LABEL":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                pairs[key] = value
    return pairs


def container(app: AppRequest) -> dict[str, object]:
    (main,) = make_app_deployment(app=app)["spec"]["template"]["spec"]["containers"]
    return dict(main)


def test_the_builders_container_runs_the_images_entrypoint_with_its_args() -> None:
    assert json.loads(only("ENTRYPOINT")) == ["vllm", "serve"]
    assert only("WORKDIR") == "/workspace"
    for app in (make_app_request(), make_app_request(adapter=None, units=1)):
        main = container(app)
        # No `command`: the image's ENTRYPOINT stays, and the builder's args follow it.
        assert "command" not in main and main["args"] == server_args(app)
        assert main["image"] == images.SERVING_IMAGE.replace(VERSION, "0.1.0")
        assert main["workingDir"] == only("WORKDIR")


def test_the_port_user_probe_and_weight_paths_are_the_images() -> None:
    (port,) = only("EXPOSE").split()
    marks = labels()
    app = make_app_request()
    main = container(app)
    assert str(AppRequest.port) == port == str(app.port)
    assert main["ports"] == [{"name": "http", "containerPort": int(port), "protocol": "TCP"}]
    args = server_args(app)
    assert args[args.index("--port") + 1] == port
    assert args[args.index("--host") + 1] == "0.0.0.0"  # noqa: S104 - reachable in the pod

    assert only("USER") == f"{RUN_AS}:{RUN_AS}"
    pod = make_app_deployment(app=app)["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (RUN_AS, RUN_AS)

    health = marks["io.ajuste.serving.health-path"]
    assert health == AppRequest.probe_path == app.probe_path == "/health"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": health, "port": "http"}  # type: ignore[index]

    assert marks["io.ajuste.serving.model-path"] == APP_MODEL_PATH
    assert args[args.index("--model") + 1] == APP_MODEL_PATH
    assert marks["io.ajuste.serving.adapter-path"] == APP_ADAPTER_PATH
    assert args[args.index("--lora-modules") + 1] == f"support-bot={APP_ADAPTER_PATH}"
    assert args[args.index("--served-model-name") + 1] == "support-bot" + BASE_SUFFIX
    assert "--enable-lora" in args and "--max-lora-rank" in args
    assert args[args.index("--tensor-parallel-size") + 1] == "2"  # two H100s

    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}  # type: ignore[attr-defined]
    assert mounts["/workspace"]["readOnly"] is True  # the server only reads the weights


def test_an_app_with_its_own_command_does_not_use_the_entrypoint() -> None:
    app = replace(make_app_request(), command=("python", "-m", "server"))
    main = container(app)
    assert main["command"] == ["python", "-m", "server"] and "args" not in main


def test_build_images_and_make_build_it_under_its_default_name() -> None:
    assert f"{REGISTRY}/serving:{VERSION}" == images.SERVING_IMAGE
    script = (REPO / "scripts" / "build-images").read_text()
    line = '"$ENGINE" build "${common[@]}" -t "$REGISTRY/serving:$VERSION" images/serving/'
    assert line in script
    assert "targets=(panel finetune serving)" in script
    assert re.search(
        r"^images:\n\tscripts/build-images .*\bserving\b", (REPO / "Makefile").read_text(), re.M
    )


def test_the_benchmark_installs_the_images_vllm(tmp_path: Path) -> None:
    serving_gpu = load_bench()
    pins = [rest for word, rest in final_stage() if word == "ARG" and rest.startswith("VLLM_")]
    assert pins == [f"VLLM_VERSION={serving_gpu.vllm_version()}"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", serving_gpu.vllm_version())


def test_the_benchmark_stops_at_once_without_a_gpu(tmp_path: Path) -> None:
    """No nvidia-smi on PATH: exit status 2 and one line saying why, nothing installed."""
    env = {**os.environ, "PATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--venv", str(tmp_path / "venv")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stdout == (
        "serving_gpu: no NVIDIA GPU here (nvidia-smi lists none): this benchmark needs one.\n"
    )
    assert not (tmp_path / "venv").exists()
