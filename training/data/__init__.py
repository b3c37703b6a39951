"""Dataset handling: JSONL validation (standard library only), tokenization with label masks,
and packing into fixed-size sequences."""
