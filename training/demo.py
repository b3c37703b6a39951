"""Demo assets for the panel's first run: a tiny random Llama and a small chat dataset.

`python -m training.demo --output DIR` writes, in a few seconds and without any download:

- `DIR/model/`: a 2-layer Llama (hidden size 64) with random weights, and a byte-level BPE
  tokenizer trained here on the demo corpus, with a small chat template;
- `DIR/data/train.jsonl`: chat examples in the `messages` format.

The fine-tune preset then runs on CPU in about a minute with DEMO_PARAMS as its options
(`demo_command()` spells the command out); the loss falls from ~6.1 to ~5.2, about what
LoRA can do against this model's random, frozen output head. The tests build their model the
same way (see tests/fixtures/llm.py).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
COUNTRIES = {
    "France": "Paris",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Germany": "Berlin",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Poland": "Warsaw",
    "Greece": "Athens",
}
# The preset's `params` for the demo: ~80 optimizer steps of ~1k tokens.
DEMO_PARAMS: dict[str, Any] = {
    "epochs": 10,
    "max_length": 256,
    "batch_size": 4,
    "learning_rate": 5e-3,
    "log_steps": 5,
}
WORDS = ["cat", "river", "cloud", "bread", "garden", "window", "silver", "planet", "music"]


@dataclass(frozen=True)
class DemoAssets:
    """Where make_demo_assets wrote things."""

    root: Path
    model_dir: Path
    data_file: Path


def _qa_pair(rng: random.Random) -> tuple[str, str]:
    """One question and its answer, from a few patterns a tiny model can pick up quickly."""
    kind = rng.randrange(3)
    if kind == 0:
        country, city = rng.choice(sorted(COUNTRIES.items()))
        return f"What is the capital of {country}?", f"The capital of {country} is {city}."
    if kind == 1:
        a, b = rng.randrange(10), rng.randrange(10)
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    word = rng.choice(WORDS)
    return f"Spell {word} backwards.", f"{word} backwards is {word[::-1]}."


def demo_conversations(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """n chat examples; some start with a system message, some have two exchanges."""
    rng = random.Random(seed)  # noqa: S311 (reproducible demo data)
    rows = []
    for _ in range(n):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": "You are a concise assistant."})
        for _turn in range(1 + (rng.random() < 0.3)):
            question, answer = _qa_pair(rng)
            messages += [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
        rows.append({"messages": messages})
    return rows


def demo_corpus(seed: int = 0) -> list[str]:
    """Text the demo tokenizer is trained on: the demo dialogues, plus plain prose."""
    pairs = [_qa_pair(random.Random(seed + i)) for i in range(400)]  # noqa: S311
    prose = [f"The {w} is near the {v}." for w in WORDS for v in WORDS]
    return [f"{q} {a}" for q, a in pairs] + prose


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer trained on corpus, wrapped for transformers, with the chat
    template (byte-level: any text round-trips, so tests can feed it anything)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",  # noqa: S106 (a token of text, not a password)
        eos_token="</s>",  # noqa: S106
        pad_token="<pad>",  # noqa: S106
        chat_template=CHAT_TEMPLATE,
    )


def build_model(tokenizer: Any, hidden: int = 64, layers: int = 2, seed: int = 0) -> Any:
    """A Llama with random weights shaped like the real thing (GQA, SwiGLU, RoPE), only tiny."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # "Writing model shards" bars on save

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def make_demo_assets(root: str | Path, examples: int = 200, seed: int = 0) -> DemoAssets:
    """Write the tiny model (with tokenizer) to root/model and the dataset to root/data."""
    root = Path(root)
    model_dir = root / "model"
    tokenizer = build_tokenizer(demo_corpus(seed))
    model = build_model(tokenizer, seed=seed)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data_file = write_jsonl(root / "data" / "train.jsonl", demo_conversations(examples, seed))
    return DemoAssets(root, model_dir, data_file)


def demo_command(root: str | Path, output: str | Path) -> list[str]:
    """The entry point's command line for the demo assets under root."""
    root = Path(root)
    command = ["python", "-m", "training.finetune", "--model", str(root / "model")]
    command += ["--data", str(root / "data"), "--output", str(output)]
    for key, value in DEMO_PARAMS.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.demo", description=__doc__)
    parser.add_argument("--output", required=True, help="directory to write model/ and data/")
    parser.add_argument("--examples", type=int, default=200, help="chat examples to write")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data")
    args = parser.parse_args(argv)
    assets = make_demo_assets(args.output, args.examples, args.seed)
    print(f"model: {assets.model_dir}\ndata: {assets.data_file}")
    print("fine-tune: " + " ".join(demo_command(assets.root, assets.root / "output")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
