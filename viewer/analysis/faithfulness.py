"""Faithfulness: does a word depend on where the model looked?

A map can sit on the dog while the word "dog" comes from the language prior (Jain and Wallace
2019; Wiegreffe and Pinter 2019). So for a word at step t we hide what the model attended there
and ask how much the word's log-probability drops, teacher-forced on the same words:
- top: the fewest units (cells or regions) holding the top half of step t's attention mass;
- random: as many units drawn at random (several seeded draws, averaged);
- the deletion curve: 0, 10, 25, 50 and 75% of the units hidden, most attended first vs random.

Hiding is the Diagnose panel's occlusion (`Captioner.caption(hidden=...)`): a hidden unit is
taken out of the model's mask for the WHOLE caption. The mask removes it from every attention
softmax (the remaining weights renormalise) and from the mean feature that initialises the LSTM
state (`models.base.masked_mean`), so nothing of a hidden unit reaches the model. With
`keep_mean=True` the initial state still sees every unit: the difference says how much of the
image reaches the words through that mean rather than through attention.
A top drop well above the random drop says the word used the place the map shows; a small drop
says the word came mostly from elsewhere (the mean feature, the beta gate, the language prior).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..engine.decoding import DecodeSettings, decode
from .grounding import bootstrap_ci, word_class

LEVELS = (0.0, 0.1, 0.25, 0.5, 0.75)   # shares of the units hidden on the deletion curve
DRAWS = 3                              # random draws per word and level


def top_half(attention: np.ndarray) -> list[int]:
    """The fewest units holding at least half of the attention mass, most attended first."""
    order = np.argsort(-attention, kind="stable")
    n = int(np.searchsorted(np.cumsum(attention[order]), 0.5 - 1e-9)) + 1
    return order[:n].tolist()


@dataclass
class WordFaithfulness:
    """How much one word's log-probability drops when what its step attended is hidden."""

    image: int
    step: int
    word: str
    hidden: int                      # units in the top half of the mass
    drop_top: float                  # nats
    drop_random: float               # nats, mean over the random draws
    curve_top: list[float] = field(default_factory=list)      # drop at each of LEVELS, most attended first
    curve_random: list[float] = field(default_factory=list)   # drop at each of LEVELS, random units


@dataclass
class Probe:
    row: int                 # which caption
    step: int
    hidden: list[int]


def forced_logprobs(model, vocab, feats: torch.Tensor, mask: torch.Tensor, rows: list[tuple[int, list[int]]],
                    probes: list[Probe], keep_mean: bool = False, batch: int = 256) -> np.ndarray:
    """log p of word `probe.step` of caption `rows[probe.row]` = (image index, token ids ending with
    <end>) with `probe.hidden` taken out of the mask, teacher-forced. A probe only needs the words
    up to its step, so each is decoded that far (most of the cost), in batches of one length."""
    out = np.empty(len(probes))
    settings = DecodeSettings(strategy="forced")
    by_step: dict[int, list[int]] = {}   # one length per batch: an unfinished prefix must last to the end
    for i, p in enumerate(probes):
        by_step.setdefault(p.step, []).append(i)
    for same in by_step.values():
        for i in range(0, len(same), batch):
            index = same[i:i + batch]
            chunk = [probes[j] for j in index]
            images = torch.tensor([rows[p.row][0] for p in chunk], device=feats.device)
            x, seen = feats.index_select(0, images), mask.index_select(0, images)
            m = seen.clone()
            for j, p in enumerate(chunk):
                m[j, p.hidden] = False
            hyps = decode(model, x, m, settings, vocab, [rows[p.row][1][:p.step + 1] for p in chunk],
                          init_mask=seen if keep_mean else None)
            out[index] = [hs[0].logprobs[p.step] for hs, p in zip(hyps, chunk)]
    return out


def measure(model, vocab, feats: torch.Tensor, mask: torch.Tensor, rows: list[tuple[int, list[int]]],
            attention: list[np.ndarray], steps: list[list[int]] | None = None, levels=LEVELS, draws: int = DRAWS,
            seed: int = 0, keep_mean: bool = False, batch: int = 256, curve_draws: int | None = None
            ) -> list[WordFaithfulness]:
    """Faithfulness of the words of forced captions. `rows`: (image index into feats, token ids
    ending with <end>); `attention[r]` (T, K): caption r's own forced attention; `steps[r]`: the
    steps to probe (default: every word naming a COCO class). `draws` random draws for the top-half
    comparison, `curve_draws` (default `draws`) at each level of the deletion curve."""
    vocab_words = vocab.words
    curve_draws = draws if curve_draws is None else curve_draws
    if steps is None:
        steps = [[t for t, tok in enumerate(ids) if word_class(vocab_words[tok])] for _, ids in rows]
    rng = np.random.default_rng(seed)
    words, probes = [], []   # words: (row, step, units in the top half, probe indices: base, top, randoms, curve)

    def probe(r: int, t: int, hidden: list[int]) -> int | None:
        """The index of the probe hiding `hidden` (none for hiding nothing: that is the word's base)."""
        if not hidden:
            return None
        probes.append(Probe(r, t, hidden))
        return len(probes) - 1

    for r, ts in enumerate(steps):
        valid = np.flatnonzero(mask[rows[r][0]].cpu().numpy())
        for t in ts:
            a = np.asarray(attention[r][t], np.float64)[valid]
            ranked = valid[np.argsort(-a, kind="stable")].tolist()
            top = valid[top_half(a)].tolist()
            randoms = [rng.choice(valid, len(top), replace=False).tolist() for _ in range(draws)]
            curve = [[ranked[:n]] + [rng.choice(valid, n, replace=False).tolist() for _ in range(curve_draws)]
                     for n in (round(f * len(valid)) for f in levels)]
            probes.append(Probe(r, t, []))   # the word as the model saw it
            words.append((r, t, len(top), len(probes) - 1, probe(r, t, top), [probe(r, t, h) for h in randoms],
                          [[probe(r, t, h) for h in level] for level in curve]))
    lp = forced_logprobs(model, vocab, feats, mask, rows, probes, keep_mean, batch)
    out = []
    for r, t, hidden, base, top, randoms, curve in words:
        def drop(i: int | None) -> float:
            return 0.0 if i is None else float(lp[base] - lp[i])
        curve_drops = np.array([[drop(i) for i in level] for level in curve]).reshape(len(curve), 1 + curve_draws)
        out.append(WordFaithfulness(rows[r][0], t, vocab_words[rows[r][1][t]], hidden, drop(top),
                                    float(np.mean([drop(i) for i in randoms])), curve_drops[:, 0].round(4).tolist(),
                                    curve_drops[:, 1:].mean(1).round(4).tolist()))
    return out


def faithfulness_block(words: list[WordFaithfulness], levels=LEVELS) -> dict:
    """Means over the probed words with image-level bootstrap intervals, and the deletion curves."""
    if not words:
        return {"words": 0}
    top = np.array([w.drop_top for w in words])
    rand = np.array([w.drop_random for w in words])
    images = [w.image for w in words]
    r4 = (lambda v: round(float(v), 4))  # noqa: E731
    return {"words": len(words), "units_hidden_mean": r4(np.mean([w.hidden for w in words])),
            "drop_top": r4(top.mean()), "drop_top_ci": bootstrap_ci(top, images),
            "drop_random": r4(rand.mean()), "drop_random_ci": bootstrap_ci(rand, images),
            "drop_difference": r4((top - rand).mean()), "drop_difference_ci": bootstrap_ci(top - rand, images),
            "ratio": r4(top.mean() / rand.mean()) if abs(rand.mean()) > 1e-9 else None,
            "halved": r4(np.mean(top >= np.log(2))),   # share of words whose probability at least halves
            "curve_levels": list(levels),
            "curve_top": np.mean([w.curve_top for w in words], 0).round(4).tolist(),
            "curve_random": np.mean([w.curve_random for w in words], 0).round(4).tolist()}


def trace_faithfulness(captioner, photo, model: str, trace, steps: list[int] | None = None, levels=LEVELS,
                       draws: int = DRAWS, seed: int = 0) -> list[WordFaithfulness]:
    """Faithfulness of a (forced or decoded) trace's words on one photo through the pipeline
    (default: every step); the words are forced as the trace has them."""
    from ..engine.vision import model_inputs
    lm = captioner.model(model)
    feats, mask = model_inputs(captioner.inputs(lm, [photo]), lm.attends_to, captioner.device)
    ids = [lm.vocab.index.get(s.word, lm.vocab.unk) for s in trace.steps]
    steps = list(range(len(ids))) if steps is None else steps
    return measure(lm.model, lm.vocab, feats, mask, [(0, ids)], [np.stack([s.attention for s in trace.steps])],
                   [steps], levels, draws, seed)
