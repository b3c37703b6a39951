"""Label masking: what each format teaches, checked token by token on the real tokenizer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from training.data.jsonl import DatasetError, Record
from training.data.tokenize import (
    IGNORE,
    assistant_spans,
    tokenize_conversation,
    tokenize_prompt_completions,
    tokenize_records,
    tokenize_texts,
)


def learned_text(tok: Any, ids: list[int], labels: list[int]) -> str:
    """The text of the learned tokens (labels equal the ids where learned)."""
    kept = [t for t, lab in zip(ids, labels, strict=True) if lab != IGNORE]
    assert kept == [lab for lab in labels if lab != IGNORE]
    return tok.decode(kept)


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 plus 2?"},
    {"role": "assistant", "content": "2 plus 2 is 4."},
    {"role": "user", "content": "Spell cat backwards."},
    {"role": "assistant", "content": "tac"},
]


def test_messages_learn_only_the_assistant_turns_and_their_end(tiny_tokenizer: Any) -> None:
    ex = tokenize_conversation(tiny_tokenizer, CONVERSATION, max_length=512)
    eos = tiny_tokenizer.eos_token
    assert learned_text(tiny_tokenizer, ex.input_ids, ex.labels) == (
        f"2 plus 2 is 4.{eos}\ntac{eos}\n"
    )
    rendered = tiny_tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert tiny_tokenizer.decode(ex.input_ids) == rendered  # the whole conversation is input


def test_assistant_spans_point_at_the_assistant_text(tiny_tokenizer: Any) -> None:
    text, spans = assistant_spans(tiny_tokenizer, CONVERSATION)
    assert [text[a:b].split(tiny_tokenizer.eos_token)[0] for a, b in spans] == [
        "2 plus 2 is 4.",
        "tac",
    ]


def test_prompt_completion_learns_only_the_completion(tiny_tokenizer: Any) -> None:
    [ex] = tokenize_prompt_completions(tiny_tokenizer, [("Q: 2+2?\nA:", " 4")], max_length=64)
    assert learned_text(tiny_tokenizer, ex.input_ids, ex.labels) == f" 4{tiny_tokenizer.eos_token}"
    assert ex.input_ids[0] == tiny_tokenizer.bos_token_id
    assert ex.labels[: len(ex.labels) - ex.supervised] == [IGNORE] * (
        len(ex.labels) - ex.supervised
    )


def test_text_learns_everything_but_the_first_token_and_ends_with_eos(tiny_tokenizer: Any) -> None:
    [ex] = tokenize_texts(tiny_tokenizer, ["The cat is near the river."], max_length=64)
    assert ex.input_ids[-1] == tiny_tokenizer.eos_token_id
    assert ex.labels[0] == IGNORE  # packed examples must not predict across their boundary
    assert ex.labels[1:] == ex.input_ids[1:]


def test_truncation_is_counted_and_examples_with_nothing_left_are_dropped(
    tiny_tokenizer: Any,
) -> None:
    long_prompt = "What is the capital of France? " * 20
    records = [
        Record("prompt_completion", {"prompt": long_prompt, "completion": " Paris."}, "f", 1),
        Record("text", {"text": "The cloud is near the garden. " * 10}, "f", 2),
        Record("text", {"text": "short"}, "f", 3),
    ]
    examples, stats = tokenize_records(tiny_tokenizer, records, max_length=16)
    assert stats.truncated == 2
    assert stats.dropped == 1  # the prompt alone fills max_length: nothing to learn
    assert stats.examples == len(examples) == 2
    assert all(len(ex.input_ids) <= 16 for ex in examples)
    assert "2 truncated" in stats.describe(16) and "1 dropped" in stats.describe(16)


def test_messages_without_a_chat_template_are_a_dataset_error(tiny_tokenizer: Any) -> None:
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = None
    record = Record("messages", {"messages": CONVERSATION}, "data.jsonl", 4)
    with pytest.raises(DatasetError) as caught:
        tokenize_records(tok, [record], max_length=64)
    assert caught.value.errors[0]["line"] == 4
    assert "no chat template" in caught.value.errors[0]["message"]


def test_a_template_error_is_reported_on_its_line(tiny_tokenizer: Any) -> None:
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = "{{ raise_exception('roles must alternate') }}"
    record = Record("messages", {"messages": CONVERSATION}, "data.jsonl", 9)
    with pytest.raises(DatasetError) as caught:
        tokenize_records(tok, [record], max_length=64)
    assert caught.value.errors[0]["line"] == 9
    assert "roles must alternate" in caught.value.errors[0]["message"]
