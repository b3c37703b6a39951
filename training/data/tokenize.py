"""Turn validated records into token ids and labels, masking what the model must not learn.

- `text`: every token is learned; EOS is appended so the model learns to stop.
- `prompt`/`completion`: only the completion (and the EOS after it) is learned.
- `messages`: rendered with the tokenizer's chat template; only the assistant turns are learned.

Every example's first label is masked too: once examples are packed side by side, that label
would otherwise teach the model to predict one example from the end of another.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from training.data.jsonl import DatasetError, Record

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

IGNORE = -100
BATCH = 512


@dataclass
class Example:
    """One tokenized example: labels are the input ids, or IGNORE where nothing is learned."""

    input_ids: list[int]
    labels: list[int]
    truncated: bool = False

    @property
    def supervised(self) -> int:
        return sum(1 for x in self.labels[1:] if x != IGNORE)


@dataclass
class DatasetStats:
    """What the human log prints before training: how much there is to learn."""

    examples: int = 0
    tokens: int = 0
    supervised: int = 0
    truncated: int = 0
    dropped: int = 0
    longest: int = 0
    formats: Counter[str] = field(default_factory=Counter)

    def describe(self, max_length: int) -> str:
        kinds = ", ".join(f"{n} {fmt}" for fmt, n in sorted(self.formats.items()))
        mean = self.tokens / max(1, self.examples)
        return (
            f"{self.examples} examples ({kinds}), {self.tokens} tokens "
            f"(mean {mean:.0f}, longest {self.longest}), {self.supervised} learned; "
            f"{self.truncated} truncated to --max-length {max_length}; "
            f"{self.dropped} dropped (nothing left to learn after truncation)"
        )


def finish(ids: list[int], labels: list[int], max_length: int) -> Example:
    """Truncate to max_length and mask the first label (see the module docstring)."""
    truncated = len(ids) > max_length
    ids, labels = ids[:max_length], labels[:max_length]
    if labels:
        labels[0] = IGNORE
    return Example(ids, labels, truncated)


def _with_eos(ids: list[int], eos: int | None) -> list[int]:
    return [*ids, eos] if eos is not None and (not ids or ids[-1] != eos) else ids


def tokenize_texts(
    tok: PreTrainedTokenizerBase, texts: list[str], max_length: int
) -> list[Example]:
    out = []
    for start in range(0, len(texts), BATCH):
        for ids in tok(texts[start : start + BATCH], add_special_tokens=True)["input_ids"]:
            ids = _with_eos(list(ids), tok.eos_token_id)
            out.append(finish(ids, list(ids), max_length))
    return out


def tokenize_prompt_completions(
    tok: PreTrainedTokenizerBase, pairs: list[tuple[str, str]], max_length: int
) -> list[Example]:
    """Prompt and completion are tokenized apart so the learned span starts on a token edge."""
    out = []
    for start in range(0, len(pairs), BATCH):
        chunk = pairs[start : start + BATCH]
        prompts = tok([p for p, _ in chunk], add_special_tokens=True)["input_ids"]
        completions = tok([c for _, c in chunk], add_special_tokens=False)["input_ids"]
        for p_ids, c_ids in zip(prompts, completions, strict=True):
            c_ids = _with_eos(list(c_ids), tok.eos_token_id)
            ids = list(p_ids) + c_ids
            out.append(finish(ids, [IGNORE] * len(p_ids) + c_ids, max_length))
    return out


def _render(tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], prompt: bool) -> str:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
    return str(text)


def assistant_spans(
    tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]]
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns.

    A turn's span is what rendering it adds after the generation prompt; this works with any
    template that renders a conversation's prefix as a prefix of the whole (nearly all do),
    without needing `{% generation %}` markers in the template.
    """
    full = _render(tok, messages, prompt=False)
    spans = []
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        before = _render(tok, messages[:i], prompt=True) if i else ""
        upto = _render(tok, messages[: i + 1], prompt=False)
        if not (full.startswith(upto) and upto.startswith(before)):
            raise ValueError(
                "the chat template does not render this conversation incrementally, so the "
                f"assistant turn messages[{i}] cannot be located"
            )
        spans.append((len(before), len(upto)))
    return full, spans


def label_spans(
    ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> list[int]:
    """Labels for ids: the id where its text starts inside one of the spans, else IGNORE."""
    labels = []
    k = 0
    for token, (start, _end) in zip(ids, offsets, strict=True):
        while k < len(spans) and start >= spans[k][1]:
            k += 1
        inside = k < len(spans) and spans[k][0] <= start < spans[k][1]
        labels.append(token if inside else IGNORE)
    return labels


def tokenize_conversation(
    tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], max_length: int
) -> Example:
    text, spans = assistant_spans(tok, messages)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    return finish(ids, label_spans(ids, list(enc["offset_mapping"]), spans), max_length)


def _conversations(
    tok: PreTrainedTokenizerBase, records: list[Record], max_length: int
) -> list[Example]:
    errors = DatasetError()
    if not getattr(tok, "chat_template", None):
        errors.add(
            records[0].file,
            records[0].line,
            "the tokenizer has no chat template, which 'messages' examples need",
        )
        raise errors
    if not tok.is_fast:
        errors.add(records[0].file, records[0].line, "'messages' examples need a fast tokenizer")
        raise errors
    out = []
    for rec in records:
        try:
            out.append(tokenize_conversation(tok, rec.value["messages"], max_length))
        except Exception as exc:  # a template's own error (e.g. roles must alternate)
            errors.add(rec.file, rec.line, f"chat template: {exc}")
    if errors.total:
        raise errors
    return out


def _by_format(
    tok: PreTrainedTokenizerBase, fmt: str, records: list[Record], max_length: int
) -> list[Example]:
    if fmt == "messages":
        return _conversations(tok, records, max_length)
    if fmt == "prompt_completion":
        pairs = [(r.value["prompt"], r.value["completion"]) for r in records]
        return tokenize_prompt_completions(tok, pairs, max_length)
    return tokenize_texts(tok, [r.value["text"] for r in records], max_length)


def tokenize_records(
    tok: PreTrainedTokenizerBase, records: list[Record], max_length: int
) -> tuple[list[Example], DatasetStats]:
    """Examples in record order (minus those with nothing left to learn) and their statistics."""
    slots: list[Example | None] = [None] * len(records)
    stats = DatasetStats(formats=Counter(r.format for r in records))
    for fmt in stats.formats:
        idx = [i for i, r in enumerate(records) if r.format == fmt]
        tokenized = _by_format(tok, fmt, [records[i] for i in idx], max_length)
        for i, example in zip(idx, tokenized, strict=True):
            slots[i] = example
    kept = []
    for slot in slots:
        assert slot is not None  # every record was tokenized by its format's function
        ex = slot
        stats.truncated += ex.truncated
        if ex.supervised == 0:
            stats.dropped += 1
            continue
        kept.append(ex)
        stats.examples += 1
        stats.tokens += len(ex.input_ids)
        stats.supervised += ex.supervised
        stats.longest = max(stats.longest, len(ex.input_ids))
    return kept, stats
