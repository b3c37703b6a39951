"""Micro-batch tensors from packed rows of examples."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from training.data.tokenize import IGNORE, Example

Batch = dict[str, torch.Tensor]


class RowData:
    """Examples grouped into rows; builds the tensors of any list of rows on demand.

    There is no attention mask on purpose: position ids that restart at each example (and at
    the padding) are how transformers recognises packed rows and keeps examples apart.
    """

    def __init__(
        self, examples: Sequence[Example], rows: list[list[int]], pad_id: int, multiple: int = 8
    ) -> None:
        self.examples = examples
        self.rows = rows
        self.pad_id = pad_id
        self.multiple = multiple  # tensor cores prefer lengths that are multiples of 8
        self.supervised = [ex.supervised for ex in examples]

    def __len__(self) -> int:
        return len(self.rows)

    def row_tokens(self, row: int) -> int:
        return sum(len(self.examples[i].input_ids) for i in self.rows[row])

    def count(self, rows: Sequence[int]) -> tuple[int, int]:
        """(real tokens, learned tokens) in these rows, without building tensors."""
        tokens = sum(self.row_tokens(r) for r in rows)
        learned = sum(self.supervised[i] for r in rows for i in self.rows[r])
        return tokens, learned

    def _row(self, row: int, width: int) -> tuple[list[int], list[int], list[int]]:
        ids: list[int] = []
        labels: list[int] = []
        pos: list[int] = []
        for i in self.rows[row]:
            ex = self.examples[i]
            ids += ex.input_ids
            labels += ex.labels
            pos += range(len(ex.input_ids))
        pad = width - len(ids)
        return ids + [self.pad_id] * pad, labels + [IGNORE] * pad, pos + list(range(pad))

    def collate(self, rows: Sequence[int]) -> Batch:
        longest = max(self.row_tokens(r) for r in rows)
        width = -(-longest // self.multiple) * self.multiple
        built = [self._row(r, width) for r in rows]
        return {
            "input_ids": torch.tensor([b[0] for b in built], dtype=torch.long),
            "labels": torch.tensor([b[1] for b in built], dtype=torch.long),
            "position_ids": torch.tensor([b[2] for b in built], dtype=torch.long),
        }
