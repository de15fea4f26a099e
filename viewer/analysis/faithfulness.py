"""Faithfulness: does a word depend on where the model looked?

A map can sit on the dog while the word "dog" comes from the language prior (Jain and Wallace
2019; Wiegreffe and Pinter 2019). So for a word at step t we hide what the model attended there
and ask how much the word's log-probability drops, teacher-forced on the same words:
- top: the fewest units (cells or regions) holding the top half of step t's attention mass;
- random: as many units drawn at random (several seeded draws, averaged);
- the deletion curve: 0, 10, 25, 50 and 75% of the units hidden, most attended first vs random.

Hiding is the Diagnose panel's occlusion (`Captioner.caption(hidden=...)`): by default a hidden
unit is taken out of the model's mask for the WHOLE caption, so a word's drop also holds what the
words before it lost. With `step_only=True` it is hidden at the word's own step only: every
earlier step (and the initial state) sees it, and the drop is what that step's reading lost
(`forcing.forced(hide=...)`, `CaptionModel.with_mask`). Every result says which (`hidden_for`).
The mask removes a unit from every attention softmax (the remaining weights renormalise) and from
the mean feature that initialises the LSTM state (`models.base.masked_mean`), so nothing of a
hidden UNIT reaches the model (tests/test_hiding.py). That is per unit, not per pixel: a cell's
feature sees its neighbours' pixels, and `updown`'s 5 context regions (whole image, quarters)
pool the same grid as the detections they cover; `context_cover` + `measure(cover=...)` hide
those with them (`python -m viewer.analysis.faithfulness --hide-context`).
With `keep_mean=True` the initial state still sees every unit: the difference says how much of the
image reaches the words through that mean rather than through attention. `updown` reads its mean
feature at every step, so there `keep_mean` keeps the hidden regions in every step's mean.
A top drop well above the random drop says the word used the place the map shows; a small drop
says the word came mostly from elsewhere (the mean feature, the beta gate, the language prior).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from ..engine.decoding import DecodeSettings
from ..engine.forcing import forced
from ..engine.words import first_step_words
from .grounding import bootstrap_ci, word_class

LEVELS = (0.0, 0.1, 0.25, 0.5, 0.75)   # shares of the units hidden on the deletion curve
DRAWS = 3                              # random draws per word and level
HIDDEN_FOR = {False: "the whole caption", True: "the word's step only"}   # what `step_only` means


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
    hidden_for: str = HIDDEN_FOR[False]   # how long the units were hidden: HIDDEN_FOR[step_only]
    hidden_total: int = 0                 # units actually hidden for drop_top (with `cover`: the context too)


@dataclass
class Probe:
    row: int                 # which caption
    step: int
    hidden: list[int]


def forced_logprobs(model, vocab, feats: torch.Tensor, mask: torch.Tensor, rows: list[tuple[int, list[int]]],
                    probes: list[Probe], keep_mean: bool = False, batch: int = 256, step_only: bool = False
                    ) -> np.ndarray:
    """log p of word `probe.step` of caption `rows[probe.row]` = (image index, token ids ending with
    <end>) with `probe.hidden` taken out of the mask (for the whole caption, or with `step_only` at
    that step only), teacher-forced (engine/forcing.py). A probe only needs the words up to its step, so
    each is forced that far (most of the cost), in batches of one length."""
    if step_only and keep_mean:
        raise ValueError("step_only already keeps the initial state seeing every unit; use one or the other")
    out = np.empty(len(probes))
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
            step = chunk[0].step   # every probe of a batch is at the same step
            tokens = torch.tensor([rows[p.row][1][:step + 1] for p in chunk], device=feats.device)
            with torch.inference_mode():
                if step_only:
                    found = forced(model, x, seen, tokens, vocab, hide=(step, m))
                else:
                    found = forced(model, x, m, tokens, vocab, init_mask=seen if keep_mean else None)
            out[index] = found.logprobs[:, step].cpu().numpy()
    return out


def measure(model, vocab, feats: torch.Tensor, mask: torch.Tensor, rows: list[tuple[int, list[int]]],
            attention: list[np.ndarray], steps: list[list[int]] | None = None, levels=LEVELS, draws: int = DRAWS,
            seed: int = 0, keep_mean: bool = False, batch: int = 256, curve_draws: int | None = None,
            step_only: bool = False, cover: list[dict[int, list[int]]] | None = None) -> list[WordFaithfulness]:
    """Faithfulness of the words of forced captions. `rows`: (image index into feats, token ids
    ending with <end>); `attention[r]` (T, K): caption r's own forced attention; `steps[r]`: the
    steps to probe (default: every word naming a COCO class). `draws` random draws for the top-half
    comparison, `curve_draws` (default `draws`) at each level of the deletion curve. `step_only`:
    hide at the word's own step only (default: for the whole caption). `cover[image][unit]`: units
    hidden whenever `unit` is (`context_cover`: the context regions over a detection), for the
    top half, the random draws and the curve alike."""
    curve_draws = draws if curve_draws is None else curve_draws
    if steps is None:   # each object word at its first token (the word layer)
        steps = [[w.first for w in vocab.word_spans(ids) if word_class(w.text)] for _, ids in rows]
    rng = np.random.default_rng(seed)
    words, probes = [], []   # words: (row, step, units in the top half, probe indices: base, top, randoms, curve)

    def probe(r: int, t: int, hidden: list[int]) -> int | None:
        """The index of the probe hiding `hidden` (none for hiding nothing: that is the word's base;
        -1 when `cover` leaves nothing to see: no drop then)."""
        if not hidden:
            return None
        if cover is not None:
            extra = cover[rows[r][0]]
            hidden = list(dict.fromkeys(hidden + [c for u in hidden for c in extra.get(u, ())]))
            if len(hidden) >= int(mask[rows[r][0]].sum()):
                return -1
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
    lp = forced_logprobs(model, vocab, feats, mask, rows, probes, keep_mean, batch, step_only)
    texts = {r: first_step_words(vocab.word_spans(rows[r][1]), len(rows[r][1])) for r in {w[0] for w in words}}
    out = []
    for r, t, hidden, base, top, randoms, curve in words:
        def drop(i: int | None) -> float:
            return 0.0 if i is None else float("nan") if i == -1 else float(lp[base] - lp[i])
        curve_drops = np.array([[drop(i) for i in level] for level in curve]).reshape(len(curve), 1 + curve_draws)
        out.append(WordFaithfulness(rows[r][0], t, texts[r][t] or vocab.display(rows[r][1][t]), hidden, drop(top),
                                    _mean([drop(i) for i in randoms]), curve_drops[:, 0].round(4).tolist(),
                                    [round(_mean(d), 4) for d in curve_drops[:, 1:]], HIDDEN_FOR[step_only],
                                    0 if top is None else int(mask[rows[r][0]].sum()) if top == -1 else len(probes[top].hidden)))
    return out


def _mean(drops) -> float:
    """The mean of the drops that were measured (nan where every one hid everything)."""
    drops = np.asarray(drops, np.float64)
    return float(drops[np.isfinite(drops)].mean()) if np.isfinite(drops).any() else float("nan")


def context_cover(regions) -> dict[int, list[int]]:
    """For a region model's `Regions`: each detection -> the context regions (vision/boxes.py CONTEXT:
    whole image, quarters) that overlap it, whose pooled features hold some of its pixels."""
    from ..engine.vision.boxes import CONTEXT
    boxes = np.asarray(regions.boxes, np.float64)
    context = [i for i, label in enumerate(regions.labels) if label in CONTEXT]
    out = {}
    for i, label in enumerate(regions.labels):
        if label in CONTEXT:
            continue
        x1, y1, x2, y2 = boxes[i]
        out[i] = [c for c in context if min(x2, boxes[c, 2]) > max(x1, boxes[c, 0])
                  and min(y2, boxes[c, 3]) > max(y1, boxes[c, 1])]
    return out


def faithfulness_block(words: list[WordFaithfulness], levels=LEVELS) -> dict:
    """Means over the probed words with image-level bootstrap intervals, and the deletion curves.
    Words whose top or random hiding left nothing to see (`measure(cover=...)`) are counted apart."""
    measured = [w for w in words if np.isfinite(w.drop_top) and np.isfinite(w.drop_random)]
    skipped, words = len(words) - len(measured), measured
    if not words:
        return {"words": 0, "words_everything_hidden": skipped}
    top = np.array([w.drop_top for w in words])
    rand = np.array([w.drop_random for w in words])
    images = [w.image for w in words]
    r4 = (lambda v: round(float(v), 4))  # noqa: E731
    return {"words": len(words), "words_everything_hidden": skipped, "units_hidden_mean": r4(np.mean([w.hidden for w in words])),
            "units_hidden_total_mean": r4(np.mean([w.hidden_total for w in words])),
            "drop_top": r4(top.mean()), "drop_top_ci": bootstrap_ci(top, images),
            "drop_random": r4(rand.mean()), "drop_random_ci": bootstrap_ci(rand, images),
            "drop_difference": r4((top - rand).mean()), "drop_difference_ci": bootstrap_ci(top - rand, images),
            "hidden_for": sorted({w.hidden_for for w in words}),
            "halved": r4(np.mean(top >= np.log(2))),   # share of words whose probability at least halves
            "curve_levels": list(levels),
            "curve_top": np.nanmean([w.curve_top for w in words], 0).round(4).tolist(),
            "curve_random": np.nanmean([w.curve_random for w in words], 0).round(4).tolist()}


def trace_faithfulness(captioner, photo, model: str, trace, steps: list[int] | None = None, levels=LEVELS,
                       draws: int = DRAWS, seed: int = 0, step_only: bool = False) -> list[WordFaithfulness]:
    """Faithfulness of a (forced or decoded) trace's words on one photo through the pipeline
    (default: every step); the words are forced as the trace has them. `step_only`: hide at each
    word's own step only, not for the whole caption (each result's `hidden_for` says which)."""
    lm = captioner.model(model)
    feats, mask = lm.batch(captioner.inputs(lm, [photo]), captioner.device)
    ids = trace.token_ids
    steps = list(range(len(ids))) if steps is None else steps
    return measure(lm.model, lm.vocab, feats, mask, [(0, ids)], [np.stack([s.attention for s in trace.steps])],
                   [steps], levels, draws, seed, step_only=step_only)


def hidden_logprob(captioner, photo, model: str, trace, step: int, hidden: list[int], step_only: bool = False) -> float:
    """log p of `trace`'s word at `step` (its words forced) with the units `hidden` out of the model's
    view for the whole caption, or with `step_only` at that step only (the Diagnose occlusion's figure)."""
    lm = captioner.model(model)
    feats, mask = lm.batch(captioner.inputs(lm, [photo]), captioner.device)
    ids = trace.token_ids
    return float(forced_logprobs(lm.model, lm.vocab, feats, mask, [(0, ids)], [Probe(0, step, list(hidden))],
                                 step_only=step_only)[0])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m viewer.analysis.faithfulness", description=main.__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="a Flickr8k-layout folder")
    p.add_argument("--split", default="dev")
    p.add_argument("--images", type=int, default=100, help="the first N photos of the split")
    p.add_argument("--step-only", action="store_true", help="hide at each word's own step only")
    p.add_argument("--keep-mean", action="store_true", help="the initial state (updown: every step's mean) sees every unit")
    p.add_argument("--hide-context", action="store_true",
                   help="region models: also hide the context regions (whole image, quarters) over each hidden detection")
    p.add_argument("--no-curve", action="store_true", help="skip the deletion curve (about 3x faster)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--checkpoints")
    return p


def main(argv: list[str] | None = None) -> int:
    """The faithfulness block of a model's forced references on the first N photos of a split, from
    the photos through the pipeline; `--hide-context` (region models) adds the same words with the
    context regions over each hidden detection hidden too, and the paired difference."""
    args = parser().parse_args(argv)
    from ..engine.images import AttendsTo, load_photo
    from ..engine.pipeline import Captioner
    from ..data.datasets import load_dataset
    from .generation import generate

    captioner = Captioner(args.device, checkpoint_dir=args.checkpoints)
    lm = captioner.model(args.model)
    if args.hide_context and lm.attends_to != AttendsTo.REGIONS:
        raise SystemExit(f"--hide-context is for region models; {lm.name} attends to a grid")
    data = load_dataset(args.data)
    paths = data.split(args.split)[:args.images]
    levels = () if args.no_curve else LEVELS
    alone, covered = [], []
    for start in range(0, len(paths), 25):
        chunk = paths[start:start + 25]
        photos = [load_photo(path) for path in chunk]
        for photo, path in zip(photos, chunk):
            photo.name = path
        items = captioner.inputs(lm, photos)
        rows = [(i, lm.vocab.encode(ref) + [lm.vocab.end]) for i, path in enumerate(chunk) for ref in data.captions[path]]
        references = list(generate(lm, [items[i] for i, _ in rows], list(range(len(rows))), DecodeSettings(strategy="forced"),
                                   device=captioner.device, prefixes=[ids for _, ids in rows]).values())
        feats, mask = lm.batch(items, captioner.device)
        attention = [h.attention.numpy() for h in references]
        kw = dict(levels=levels, seed=start, keep_mean=args.keep_mean, curve_draws=1, step_only=args.step_only)
        runs = [(alone, None)] + ([(covered, [context_cover(it.regions) for it in items])] if args.hide_context else [])
        for out, cover in runs:
            found = measure(lm.model, lm.vocab, feats, mask, rows, attention, cover=cover, **kw)
            for w in found:
                w.image += start
            out += found
        print(f"{start + len(chunk)}/{len(paths)} photos, {len(alone)} words", file=sys.stderr)
    result = {"model": lm.name, "split": args.split, "images": len(paths), "keep_mean": args.keep_mean,
              "hidden_for": HIDDEN_FOR[args.step_only], "units": faithfulness_block(alone, levels)}
    if args.hide_context:
        result["units_and_covering_context"] = faithfulness_block(covered, levels)
        pairs = [(a, c) for a, c in zip(alone, covered) if np.isfinite(c.drop_top) and np.isfinite(c.drop_random)]
        result["units_on_the_same_words"] = faithfulness_block([a for a, _ in pairs], levels)   # as the context block
        extra = np.array([c.drop_top - a.drop_top for a, c in pairs])
        result["drop_top_added_by_context"] = round(float(extra.mean()), 4) if len(extra) else None
        result["drop_top_added_by_context_ci"] = bootstrap_ci(extra, [a.image for a, _ in pairs]) if len(extra) else None
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
