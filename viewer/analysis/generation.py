"""Batched decoding of photos whose features are already computed: what the split evaluation
(evaluate.py) and the faithfulness run (faithfulness.py) both decode with, below both."""
from __future__ import annotations

from ..engine.decoding import DecodeSettings, Hypothesis, decode


def generate(loaded, items, names, settings: DecodeSettings, batch_size: int = 100, device="cpu",
             prefixes: list[list[int]] | None = None, constraints: list | None = None,
             prompts=None, avoid: list | None = None) -> dict[str, Hypothesis]:
    """The best hypothesis for each image (features already computed), batched; with `prefixes`
    (and a forced strategy), the given token sequences scored instead; with `constraints` (per
    image, engine/constraints.py), constrained beam search, never completing the words to `avoid`
    (per image, token sequences); with `prompts` (a tensor of question
    word ids, one row per item), a question answering model's answers."""
    out = {}
    for i in range(0, len(items), batch_size):
        x, mask = loaded.batch(items[i:i + batch_size], device)
        chunk = None if prefixes is None else prefixes[i:i + batch_size]
        hyps = decode(loaded.model, x, mask, settings, loaded.vocab, chunk,
                      constraints=None if constraints is None else constraints[i:i + batch_size],
                      prompt=None if prompts is None else prompts[i:i + batch_size],
                      avoid=None if avoid is None else avoid[i:i + batch_size])
        out.update((name, hs[0]) for name, hs in zip(names[i:i + batch_size], hyps))
    return out
