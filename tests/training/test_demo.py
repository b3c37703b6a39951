"""The first-run demo assets: a tiny model with a chat-template tokenizer and a chat dataset."""

from __future__ import annotations

from typing import Any

from tests.fixtures.llm import TinyLLM
from training.data.jsonl import load_records
from training.demo import DEMO_PARAMS, demo_command
from training.options import parse_options


def test_demo_assets_are_a_loadable_model_and_a_valid_chat_dataset(
    tiny_llm: TinyLLM, tiny_tokenizer: Any
) -> None:
    # tiny_llm is made by training.demo.make_demo_assets (48 examples)
    assert (tiny_llm.model_dir / "config.json").is_file()
    assert (tiny_llm.model_dir / "model.safetensors").stat().st_size < 2_000_000
    assert tiny_tokenizer.chat_template and tiny_tokenizer.pad_token_id is not None
    train, evals = load_records(str(tiny_llm.messages.parent), None, 0.0, 0)
    assert len(train) == 48 and not evals
    assert {r.format for r in train} == {"messages"}


def test_the_demo_command_is_a_valid_finetune_command(tiny_llm: TinyLLM) -> None:
    command = demo_command(tiny_llm.model_dir.parent, "/tmp/out")
    assert command[:3] == ["python", "-m", "training.finetune"]
    opts = parse_options(command[3:])
    assert opts.model == str(tiny_llm.model_dir)
    assert opts.data == str(tiny_llm.messages.parent)
    assert {key: getattr(opts, key) for key in DEMO_PARAMS} == DEMO_PARAMS
