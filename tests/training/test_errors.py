"""Mistakes are reported by the entry point within seconds: one error event, exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.llm import (
    FinetuneResult,
    TinyLLM,
    finetune_command,
    finetune_env,
    parse_output,
    run_finetune,
)

TORCH_IMPORTED = 97

GOOD_CHAT = {
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
}
BAD_DATASETS = {
    "invalid JSON": (['{"text": "fine"}', '{"text": "cut'], 2, "invalid JSON"),
    "unknown keys": ([{"question": "q", "answer": "a"}], 1, "expected a 'text', 'messages'"),
    "bad role": (
        [GOOD_CHAT, {"messages": [{"role": "human", "content": "hi"}]}],
        2,
        "messages[0].role must be one of",
    ),
    "missing completion": (
        [{"prompt": "p", "completion": "c"}, {"prompt": "p"}],
        2,
        "'completion'",
    ),
    "no assistant turn": (
        [{"messages": [{"role": "user", "content": "hi"}]}],
        1,
        "no assistant message",
    ),
    "empty file": ([], 0, "no examples"),
}


def write(path: Path, lines: list[Any]) -> Path:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    path.write_text(text, encoding="utf-8")
    return path


def run_without_torch(tmp_path: Path, *args: str | Path) -> FinetuneResult:
    """The entry point with a `torch` first on the path that exits with TORCH_IMPORTED."""
    poison = tmp_path / "no-torch" / "torch"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text(f"import os\nos._exit({TORCH_IMPORTED})\n")
    env = finetune_env()
    env["PYTHONPATH"] = os.pathsep.join([str(poison.parent), env["PYTHONPATH"]])
    proc = subprocess.run(
        finetune_command(*args), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != TORCH_IMPORTED, "torch was imported"
    return parse_output(proc.returncode, proc.stdout, proc.stderr)


def only_error(result: Any) -> dict[str, Any]:
    assert [e["event"] for e in result.events] == ["error"], result.events
    return result.events[0]


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
def test_a_bad_dataset_fails_before_the_model_is_loaded(tmp_path: Path, case: str) -> None:
    lines, line_no, message = BAD_DATASETS[case]
    data = write(tmp_path / "train.jsonl", lines)
    # no model exists at this path: the dataset must be refused before it is looked for, and
    # before torch is imported (seconds): a torch that ends the process stands in for it here
    result = run_without_torch(
        tmp_path, "--model", tmp_path / "no-model", "--data", data, "--output", tmp_path / "o"
    )
    assert result.returncode == 2
    error = only_error(result)
    assert error["kind"] == "dataset" and error["exit_code"] == 2
    assert error["errors"][0]["file"] == str(data)
    assert error["errors"][0]["line"] == line_no
    assert message in error["errors"][0]["message"]
    assert message in error["message"]
    assert any(line.startswith("[training] error (dataset)") for line in result.lines)
    status = json.loads((tmp_path / "o" / "status.json").read_text())
    assert status["state"] == "failed" and status["last_event"] == error


@pytest.mark.slow  # imports torch to ask for CUDA: seconds, unlike the other checks here
def test_qlora_without_cuda_is_refused_before_loading_anything(
    tiny_llm: TinyLLM, tmp_path: Path
) -> None:
    result = run_finetune(
        "--model", tiny_llm.model_dir, "--data", tiny_llm.messages, "--output", tmp_path,
        "--method", "qlora",
    )  # fmt: skip
    assert result.returncode == 2
    error = only_error(result)
    assert error["kind"] == "environment"
    assert "--method qlora needs a CUDA GPU" in error["message"]
    assert not any("loading" in line for line in result.lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "d", "--output", "o"], "the following arguments are required: --model"),
        (["--model", "m", "--data", "d", "--output", "o", "--method", "full"], "invalid choice"),
        (["--model", "m", "--data", "d", "--output", "o", "--rank", "0"], "--rank must be"),
        (["--model", "m", "--data", "d", "--output", "o", "--eval-split", "1"], "--eval-split"),
    ],
)
def test_bad_options_are_a_config_error(args: list[str], message: str) -> None:
    result = run_finetune(*args)
    assert result.returncode == 2
    error = only_error(result)
    assert error["kind"] == "config"
    assert message in error["message"]


def test_help_documents_every_option_with_its_default() -> None:
    result = run_finetune("--help")
    assert result.returncode == 0
    text = " ".join(" ".join(result.lines).split())  # argparse wraps lines anywhere
    for option, default in [
        ("--method", "lora"), ("--rank", "16"), ("--alpha", "32"), ("--dropout", "0.05"),
        ("--target-modules", "all-linear"), ("--learning-rate", "0.0002"), ("--epochs", "1.0"),
        ("--max-steps", "-1"), ("--batch-size", "4"), ("--grad-accum", "1"),
        ("--max-length", "2048"), ("--warmup-ratio", "0.03"), ("--seed", "42"),
        ("--eval-split", "0.0"), ("--save-steps", "200"), ("--gradient-checkpointing", "auto"),
        ("--bf16", "auto"), ("--packing", "auto"),
    ]:  # fmt: skip
        assert option in text
        assert f"(default: {default})" in text
    assert "--merge" in text and "--no-resume" in text


def test_another_ranks_failure_still_reaches_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from training.finetune import _fail
    from training.reporting import Reporter

    monkeypatch.setenv("RANK", "3")
    stream = io.StringIO()
    quiet = Reporter(tmp_path / "out", enabled=False, stream=stream)  # what ranks 1.. have
    assert _fail(quiet, "runtime", "OutOfMemoryError: CUDA out of memory", 1) == 1
    event = json.loads(next(x for x in stream.getvalue().splitlines() if x.startswith("{")))
    assert (event["event"], event["kind"], event["rank"]) == ("error", "runtime", 3)
    assert not (tmp_path / "out").exists()  # status.json is rank 0's alone
