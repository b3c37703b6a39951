"""The real entry point, run as the pod runs it, on each dataset format."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from tests.fixtures.llm import FORMATS, TinyLLM

PROGRESS_FIELDS = {
    "step", "max_steps", "epoch", "loss", "learning_rate", "grad_norm", "tokens_seen",
    "tokens_per_s", "elapsed_s", "eta_s",
}  # fmt: skip
STEPS = list(range(1, 13))


@pytest.fixture
def runs(finetune_runs: dict[str, Any]) -> dict[str, Any]:
    return finetune_runs


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_trains_and_reports_progress(runs: dict[str, Any], fmt: str) -> None:
    result, _ = runs[fmt]
    assert result.returncode == 0, "\n".join(result.lines[-30:])
    kinds = [e["event"] for e in result.events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert kinds.count("start") == kinds.count("done") == 1
    progress = result.of("progress")
    assert [e["step"] for e in progress] == STEPS
    for event in progress:
        assert event.keys() >= PROGRESS_FIELDS
        assert event["max_steps"] == 12 and event["tokens_per_s"] > 0
        assert "gpu_mem_gb" not in event  # no GPU here
    assert progress[-1]["eta_s"] == 0
    assert progress[-1]["tokens_seen"] > progress[0]["tokens_seen"] > 0
    assert [e["step"] for e in result.of("checkpoint")] == [3, 6, 9, 12]
    assert progress[-1]["loss"] < progress[0]["loss"]  # it learns something
    assert all(line.startswith("[training] ") for line in result.lines if line.startswith("["))
    assert not any("%|" in line or "\r" in line for line in result.lines)  # no progress bars


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_run_writes_the_promised_outputs(runs: dict[str, Any], fmt: str) -> None:
    result, out = runs[fmt]
    assert {p.name for p in (out / "adapter").iterdir()} >= {
        "adapter_config.json", "adapter_model.safetensors", "tokenizer.json",
        "tokenizer_config.json",
    }  # fmt: skip
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step-000009", "step-000012",
    ]  # fmt: skip
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics == [e for e in result.events if e["event"] in ("progress", "eval")]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "done" and status["step"] == 12 and status["max_steps"] == 12
    assert status["last_event"] == result.of("done")[0]
    assert result.of("done")[0]["adapter_path"] == str(out / "adapter")


@pytest.mark.slow
def test_evaluation_runs_on_the_held_out_split(runs: dict[str, Any]) -> None:
    result, _ = runs["messages"]
    start = result.of("start")[0]
    assert start["eval_examples"] == 5 and start["train_examples"] == 43
    evals = result.of("eval")
    assert [e["step"] for e in evals] == [3, 6, 9, 12]
    assert all(e["eval_loss"] > 0 and e["eval_tokens"] > 0 for e in evals)


def _logits(model: Any, tok: Any) -> torch.Tensor:
    ids = tok("What is the capital of Spain?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.slow
def test_the_adapter_loads_with_peft_changes_the_output_and_merges(
    runs: dict[str, Any], tiny_llm: TinyLLM
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, out = runs["messages"]
    tok = AutoTokenizer.from_pretrained(out / "adapter")
    base = AutoModelForCausalLM.from_pretrained(tiny_llm.model_dir).eval()
    before = _logits(base, tok)
    tuned = PeftModel.from_pretrained(base, out / "adapter").eval()
    after = _logits(tuned, tok)
    assert (after - before).abs().max() > 1e-3
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 16
    assert {name.rsplit(".", 1)[-1] for name in config["target_modules"]} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    }  # fmt: skip
    merged = AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    assert torch.allclose(_logits(merged, tok), after, atol=1e-4)
    assert result.of("done")[0]["merged_path"] == str(out / "merged")
