"""GPU benchmark of the serving image's server: vLLM's OpenAI-compatible server (`vllm serve`,
the version images/serving/Dockerfile pins) started with the arguments an app's Deployment
passes (deploy/manifests/apps.py server_args: a base model and a LoRA adapter served under the
app's name), then requests per second and p50/p95 latency of chat completions through the
official `openai` client, `--concurrency` callers at once. Nothing is downloaded but vLLM
itself: the model (a Llama shaped like training.demo's, larger: --hidden, --layers, random
weights) and its LoRA adapter (random, r=16 on q/k/v/o) are written to a temporary folder.

    python bench/serving_gpu.py                  # on a GPU machine; prints its figures
    python bench/serving_gpu.py --requests 400 --concurrency 32 --max-tokens 64

Where `vllm` is not importable, it makes a venv (--venv, default ~/.cache/ajuste/serving-venv),
installs `vllm==<pin> peft openai` into it (PyPI, or PIP_FIND_LINKS / PIP_INDEX_URL where the
machine reaches no index), and runs itself again there. Without an NVIDIA GPU (nvidia-smi lists
none) it stops at once with exit status 2. Results also go to $OUT/serving_gpu.json when $OUT
is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "images" / "serving" / "Dockerfile"
NAME = "bench-bot"


def vllm_version() -> str:
    """The image's pin: `ARG VLLM_VERSION=...` in images/serving/Dockerfile."""
    found = re.search(r"^ARG VLLM_VERSION=(\S+)$", DOCKERFILE.read_text(), re.M)
    if not found:
        raise SystemExit(f"{DOCKERFILE}: no `ARG VLLM_VERSION=` line")
    return found.group(1)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=200, help="timed requests")
    p.add_argument("--concurrency", type=int, default=16, help="callers at once")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens generated per answer")
    p.add_argument("--hidden", type=int, default=1024, help="model width (head size hidden/8)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--venv", default=str(Path.home() / ".cache/ajuste/serving-venv"))
    p.add_argument("--startup-timeout", type=float, default=900, help="seconds")
    return p.parse_args()


def require_gpu() -> None:
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True) if smi else None
    if listed is None or listed.returncode != 0 or "GPU" not in listed.stdout:
        print("serving_gpu: no NVIDIA GPU here (nvidia-smi lists none): this benchmark needs one.")
        raise SystemExit(2)
    print(listed.stdout.strip())


def ensure_vllm(args: argparse.Namespace) -> None:
    """Run again inside a venv holding the pinned vLLM, unless this Python has it already."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        return
    venv = Path(args.venv)
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pin = vllm_version()
    print(f"• installing vllm=={pin} peft openai into {venv}", flush=True)
    packages = [f"vllm=={pin}", "peft", "openai"]
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    os.execv(str(python), [str(python), *sys.argv])  # noqa: S606 - this script, again


def write_model(root: Path, hidden: int, layers: int) -> tuple[Path, Path]:
    """A random Llama with training.demo's tokenizer and chat template, and a LoRA adapter
    whose B matrices are not zero (so the adapter's path does real work)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(REPO))
    from training.demo import build_tokenizer, demo_corpus

    tokenizer = build_tokenizer(demo_corpus(0))
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 3,
        num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
        max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.02)
    lora.save_pretrained(str(root / "adapter"))
    return root / "model", root / "adapter"


def server_command(model: Path, adapter: Path, port: int) -> list[str]:
    """`vllm serve` with server_args' flags for a one-GPU app with an adapter, the image's
    /workspace paths replaced by the temporary folder's."""
    vllm = Path(sys.executable).with_name("vllm")
    return [
        str(vllm), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", NAME + "-base", "--enable-lora", "--max-lora-rank", "64",
        "--lora-modules", f"{NAME}={adapter}",
    ]  # fmt: skip


def wait_ready(url: str, server: subprocess.Popen[bytes], timeout: float) -> float:
    import httpx

    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if server.poll() is not None:
            raise SystemExit(f"serving_gpu: the server exited ({server.returncode}) before ready")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"serving_gpu: the server was not ready in {timeout:.0f} s")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered) + 0.5) - 1)]  # nearest rank


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)

    def one(i: int) -> float:
        began = time.perf_counter()
        answer = client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": f"What is the capital of {i}?"}],
            max_tokens=args.max_tokens, extra_body={"ignore_eos": True},
        )  # fmt: skip
        assert answer.choices[0].message.content is not None
        return time.perf_counter() - began

    models = {m.id for m in client.models.list()}
    assert {NAME, NAME + "-base"} <= models, models
    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(one, range(args.concurrency * 2)))  # warm-up, untimed
        began = time.perf_counter()
        latencies = list(pool.map(one, range(args.requests)))
        wall = time.perf_counter() - began
    return {
        "requests": args.requests, "concurrency": args.concurrency,
        "max_tokens": args.max_tokens, "requests_per_s": round(args.requests / wall, 2),
        "tokens_per_s": round(args.requests * args.max_tokens / wall, 1),
        "p50_s": round(percentile(latencies, 0.50), 4),
        "p95_s": round(percentile(latencies, 0.95), 4),
    }  # fmt: skip


def main() -> int:
    args = parse_args()
    require_gpu()
    ensure_vllm(args)
    import vllm

    with tempfile.TemporaryDirectory() as tmp:
        model, adapter = write_model(Path(tmp), args.hidden, args.layers)
        url = f"http://127.0.0.1:{args.port}"
        server = subprocess.Popen(server_command(model, adapter, args.port))
        try:
            ready_s = wait_ready(url, server, args.startup_timeout)
            result = {"vllm": vllm.__version__, "ready_s": round(ready_s, 1), **measure(url, args)}
        finally:
            server.terminate()
            server.wait(timeout=60)
    print(json.dumps(result))
    print(
        f"vLLM {result['vllm']} + LoRA: {result['requests_per_s']} requests/s, "
        f"p50 {result['p50_s'] * 1000:.0f} ms, p95 {result['p95_s'] * 1000:.0f} ms "
        f"({args.concurrency} callers, {args.max_tokens} tokens each)"
    )
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "serving_gpu.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
