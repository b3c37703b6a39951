"""Packing, the step layout, and the loss: packed examples must train exactly as if alone."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from training import loss as loss_module
from training.data.batches import RowData
from training.data.packing import (
    Layout,
    fill_ratio,
    group_by_length,
    pack,
    padded_ratio,
    unpacked,
)
from training.data.tokenize import IGNORE, Example, finish, tokenize_texts
from training.loss import CausalLMLoss, chunked_loss


def test_pack_keeps_every_example_once_within_capacity() -> None:
    rng = random.Random(0)
    lengths = [rng.randint(1, 100) for _ in range(500)] + [100, 100]
    rows = pack(lengths, 100)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 100 for row in rows)
    # best-fit decreasing gets within a few rows of the lower bound on this distribution
    assert len(rows) <= sum(lengths) / 100 * 1.05 + 1


def test_unpacked_is_one_example_per_row() -> None:
    assert unpacked(3) == [[0], [1], [2]]


def test_layout_gives_each_rank_its_micro_batches_every_step() -> None:
    layout = Layout(num_rows=10, batch_size=2, grad_accum=2, world_size=2, seed=1)
    assert layout.num_batches == 5 and layout.steps_per_epoch == 2  # 5 / 4 per step, rounded up
    batches = layout.epoch_batches(0)
    assert len(batches) == 8  # wrapped around so that the last step is full too
    assert sorted(row for b in batches[:5] for row in b) == list(range(10))
    seen = []
    for step in range(layout.steps_per_epoch):
        per_rank = layout.step_batches(batches, step)
        assert [len(r) for r in per_rank] == [2, 2]  # grad_accum micro-batches per rank
        seen += [b for rank in per_rank for b in rank]
    assert sorted(seen) == sorted(batches)  # each micro-batch of the epoch exactly once
    assert layout.epoch_batches(1) != batches  # reshuffled each epoch
    assert layout.epoch_batches(0) == batches  # and reproducible (resume finds its place)


def test_grouped_batches_stay_within_the_token_budget_and_are_shuffled_whole() -> None:
    rng = random.Random(0)
    lengths = [rng.randint(5, 400) for _ in range(300)] + [512]
    batches = group_by_length(lengths, budget=1024)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) * max(lengths[i] for i in b) <= 1024 for b in batches)
    assert padded_ratio(batches, lengths) > 0.9  # similar lengths together: little padding
    fixed = tuple(tuple(b) for b in batches)
    layout = Layout(len(lengths), 4, 1, 1, seed=0, fixed=fixed)
    assert layout.steps_per_epoch == len(batches)
    assert sorted(map(tuple, layout.epoch_batches(3))) == sorted(fixed)


def _examples() -> list[Example]:
    return [
        finish([1, 5, 6, 7], [1, 5, 6, 7], 64),
        finish([1, 8, 9], [IGNORE, IGNORE, 9], 64),
        finish([1, 4, 4, 4, 4], [1, 4, 4, 4, 4], 64),
    ]


def test_collate_restarts_positions_per_example_and_masks_padding() -> None:
    examples = _examples()
    data = RowData(examples, [[0, 1], [2]], pad_id=0, multiple=8)
    batch = data.collate([0, 1])
    assert batch["input_ids"].shape == (2, 8)
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 3, 0, 1, 2, 0]
    assert batch["position_ids"][1].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert batch["labels"][0].tolist() == [IGNORE, 5, 6, 7, IGNORE, IGNORE, 9, IGNORE]
    assert data.count([0, 1]) == (12, 3 + 1 + 4)
    assert fill_ratio(data.rows, examples, 8) == pytest.approx(12 / 16)


@pytest.fixture(scope="module")
def tiny_model(tiny_llm: Any) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llm.model_dir, attn_implementation="sdpa")
    return model.eval()


def _sum_loss(model: Any, data: RowData, rows: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return CausalLMLoss(model)(**data.collate(rows))


def test_packed_examples_do_not_see_each_other(tiny_model: Any, tiny_tokenizer: Any) -> None:
    texts = ["The cat is near the river.", "What is 3 plus 4?", "Spell cloud backwards."]
    examples = tokenize_texts(tiny_tokenizer, texts, max_length=64)
    packed = RowData(examples, [[0, 1, 2]], tiny_tokenizer.pad_token_id)
    alone = RowData(examples, [[0], [1], [2]], tiny_tokenizer.pad_token_id)
    together = _sum_loss(tiny_model, packed, [0])
    separately = sum(_sum_loss(tiny_model, alone, [i]) for i in range(3))
    assert together.item() == pytest.approx(separately.item(), rel=1e-5)


def test_the_learned_positions_loss_equals_transformers_own(
    tiny_model: Any, tiny_tokenizer: Any
) -> None:
    examples = tokenize_prompt_pairs(tiny_tokenizer)
    data = RowData(examples, [[0], [1]], tiny_tokenizer.pad_token_id)
    batch = data.collate([0, 1])
    ours = _sum_loss(tiny_model, data, [0, 1]) / data.count([0, 1])[1]
    with torch.no_grad():
        theirs = tiny_model(**batch).loss
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)


def tokenize_prompt_pairs(tok: Any) -> list[Example]:
    from training.data.tokenize import tokenize_prompt_completions

    pairs = [("Q: capital of Italy?\nA:", " Rome."), ("Q: 1 plus 1?\nA:", " 2.")]
    return tokenize_prompt_completions(tok, pairs, max_length=64)


def test_chunked_loss_and_its_gradient_match_the_plain_one(monkeypatch: Any) -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(23, 8, requires_grad=True)
    targets = torch.randint(0, 50, (23,))
    plain = chunked_loss(hidden, targets, head)
    (plain_grad,) = torch.autograd.grad(plain, hidden)
    monkeypatch.setattr(loss_module, "CHUNK", 5)
    chunked = chunked_loss(hidden, targets, head)
    (chunked_grad,) = torch.autograd.grad(chunked, hidden)
    assert chunked.item() == pytest.approx(plain.item(), rel=1e-6)
    assert torch.allclose(chunked_grad, plain_grad, atol=1e-6)
