"""Pixel-space faithfulness of per-word maps: deletion curves and visual dependence.

For a word t and its map (14x14 over the photo), the photo's cells are hidden in the map's order,
each hidden cell filled by an imputer (explain/imputers.py: `blur`, the blurred photo, which
occlusion and the superpixel methods also build their maps with; `road`, ROAD's noisy linear
imputation, which no method optimises), and the whole pipeline runs again (explain.Pipeline: encoder, detector and
pooled features for region models), teacher forced on the same caption. We record the word's
log-prob DROP in nats (0 at 0%) at `LEVELS` of the photo hidden:
- MoRF: most relevant cells first (a faithful map makes the word fall fast: high is good);
- LeRF: least relevant first (a faithful map keeps the word: low is good);
- random: a random order, the floor (the same seeded orders for every word and method).
Area under a curve = mean drop over 0..90% (trapezoid over the hidden fraction / 0.9), in nats.
The gap = (LeRF_score - MoRF_score) / 2 on the score, i.e. (AUC_MoRF - AUC_LeRF) / 2 on drops:
high is good. Under the `road` imputer it is ROAD (Rong et al. 2022); under the blur it is only
the blur gap, and reports name it so. Ties in a map (an all-zero map, flat regions) are broken at
random (seeded).

Visual dependence of a word: log p(word | photo) - log p(word | photo entirely hidden): blurred
away (`blur`), or removed (`road`: nothing left to interpolate, the photo's mean colour + noise).
All photos of one caption (every level, order, word and method) go through the pipeline in batches.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..engine.images import GRID
from .explain import Pipeline, explain
from .explain.imputers import check_imputer

LEVELS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9)   # shares of the photo hidden
RANDOM_DRAWS = 2


def order(grid_map: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Cells (row-major) most relevant first; ties in random order."""
    m = np.ravel(grid_map).astype(np.float64)
    jitter = rng.random(m.size)
    return np.lexsort((jitter, -m))


def keep_masks(orders: np.ndarray, levels=LEVELS, least_first: bool = False) -> np.ndarray:
    """orders (N, 196) -> keep masks (N, L, 14, 14): at level f the first round(f * 196) cells hidden
    (the last ones, with `least_first`)."""
    cells = GRID * GRID
    out = np.ones((len(orders), len(levels), cells), np.float32)
    for i, o in enumerate(orders):
        o = o[::-1] if least_first else o
        for j, f in enumerate(levels):
            out[i, j, o[:round(f * cells)]] = 0.0
    return out.reshape(len(orders), len(levels), GRID, GRID)


def auc(curve: np.ndarray, levels=LEVELS) -> np.ndarray:
    """Mean drop over the levels' range (trapezoid / range), last axis = levels."""
    x = np.asarray(levels, np.float64)
    return np.trapezoid(curve, x, axis=-1) / (x[-1] - x[0])


@dataclass
class Deletion:
    """Deletion curves of every word of one caption, for each method's maps."""

    words: list[str]
    levels: tuple[float, ...]
    base: np.ndarray                       # (T,) log p(word | photo)
    removed: np.ndarray                    # (T,) log p(word | photo entirely hidden by the imputer)
    random: np.ndarray                     # (T, L) drop, mean over the random orders
    morf: dict[str, np.ndarray] = field(default_factory=dict)   # method -> (T, L) drop, nats
    lerf: dict[str, np.ndarray] = field(default_factory=dict)
    imputer: str = "blur"

    @property
    def visual_dependence(self) -> np.ndarray:
        return self.base - self.removed

    def auc(self, method: str | None = None, which: str = "morf") -> np.ndarray:
        """(T,) area under a method's MoRF / LeRF curve, or the random curve with method=None."""
        curve = self.random if method is None else getattr(self, which)[method]
        return auc(curve, self.levels)

    def gap(self, method: str) -> np.ndarray:
        """(T,) (AUC_MoRF - AUC_LeRF) / 2 in nats of drop: (LeRF - MoRF) / 2 on the score (ROAD under `road`)."""
        return (self.auc(method, "morf") - self.auc(method, "lerf")) / 2

    @property
    def gap_name(self) -> str:
        return "road" if self.imputer == "road" else f"{self.imputer}_gap"

    def summary(self, steps: list[int] | None = None) -> dict:
        """Means over `steps` (default: every word but <end>)."""
        steps = [t for t, w in enumerate(self.words) if w not in ("", "<end>")] if steps is None else steps
        r = lambda v: round(float(np.mean(v[steps])), 4) if steps else None  # noqa: E731
        out = {"words": len(steps), "visual_dependence": r(self.visual_dependence), "auc_random": r(self.auc())}
        for m in self.morf:
            out[m] = {"auc_morf": r(self.auc(m, "morf")), "auc_lerf": r(self.auc(m, "lerf")), self.gap_name: r(self.gap(m))}
        return out


def deletion(pipe: Pipeline, maps: dict[str, np.ndarray], levels=LEVELS, random_draws: int = RANDOM_DRAWS,
             seed: int = 0, steps: list[int] | None = None, imputer: str = "blur") -> Deletion:
    """Deletion curves (MoRF, LeRF, random) of each word's map for each method, and visual dependence.

    `maps`: method -> (T, 14, 14) (explain.Explanation.maps). `steps`: which words (default all).
    `imputer`: what hidden cells become (explain/imputers.py).
    Photos: (2 * methods * words + draws) * (levels - 1) + 1, in batches through the pipeline.
    """
    check_imputer(imputer)
    rng = np.random.default_rng(seed)
    t_len = pipe.steps
    steps = list(range(t_len)) if steps is None else list(steps)
    lv = [f for f in levels if f > 0]
    rand_orders = np.stack([rng.permutation(GRID * GRID) for _ in range(random_draws)])
    blocks = [keep_masks(rand_orders, lv).reshape(-1, GRID, GRID), np.zeros((1, GRID, GRID), np.float32)]
    index = {}
    for m, mp in maps.items():
        orders = np.stack([order(mp[t], rng) for t in steps])
        for which, least in (("morf", False), ("lerf", True)):
            index[(m, which)] = sum(len(b) for b in blocks)
            blocks.append(keep_masks(orders, lv, least).reshape(-1, GRID, GRID))
    lp = pipe.whole_words(pipe.logprobs(torch.from_numpy(np.concatenate(blocks)), imputer)).numpy().astype(np.float64)
    base = pipe.whole_words(pipe.base()).numpy().astype(np.float64)   # (M, T), (T,): words' log-probs
    n_rand = random_draws * len(lv)
    zero = np.zeros((t_len, 1)) if levels[0] == 0 else np.zeros((t_len, 0))
    rand = (base[None] - lp[:n_rand]).reshape(random_draws, len(lv), t_len).mean(0).T      # (T, L')
    out = Deletion(pipe.words, tuple(levels), base, lp[n_rand], np.concatenate([zero, rand], 1), imputer=imputer)
    for (m, which), start in index.items():
        curve = np.full((t_len, len(lv)), np.nan)
        rows = lp[start:start + len(steps) * len(lv)].reshape(len(steps), len(lv), t_len)
        for i, t in enumerate(steps):
            curve[t] = base[t] - rows[i, :, t]
        getattr(out, which)[m] = np.concatenate([zero, curve], 1)
    return out


def step_explanations(captioner, photo, model: str, caption, methods: tuple[str, ...],
                      imputers: tuple[str, ...] = ("blur",)) -> list[dict]:
    """Per step of `caption` (a trace's token ids, or text; forced, <end> included): each method's 14x14
    map and, per imputer, its deletion AUC (MoRF), its gap (`blur_gap`, or `road`), the random order's
    AUC and the word's visual dependence, for `caption --json --explain` (README schema)."""
    pipe = Pipeline(captioner, photo, model, caption)
    found = explain(captioner, photo, model, caption, methods, pipe=pipe)
    r = lambda v: round(float(v), 4)  # noqa: E731
    out = [{"explain": {m: np.round(found.maps[m][t], 6).tolist() for m in methods}} for t in range(pipe.steps)]
    for imputer in imputers:
        curves = deletion(pipe, found.maps, imputer=imputer)
        for t, item in enumerate(out):
            item[imputer] = {"deletion_auc": {m: r(curves.auc(m)[t]) for m in methods},
                             curves.gap_name: {m: r(curves.gap(m)[t]) for m in methods},
                             "deletion_auc_random": r(curves.auc()[t]),
                             "visual_dependence": r(curves.visual_dependence[t])}
    return out


INSERT_LEVELS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)   # shares of the photo put back on the hidden one


@dataclass
class Insertion:
    """Insertion curves (RISE, Petsiuk et al. 2018) of words of one caption, for each method's maps:
    from the photo entirely hidden (blurred away, or under `road` its mean colour), its cells are put
    back most relevant first and the word's log-prob RISE over the hidden photo is recorded (nats; 0
    at 0%, visual dependence at 100%). Area = mean rise over 0..100% (trapezoid): high is good."""

    words: list[str]
    levels: tuple[float, ...]
    base: np.ndarray                       # (T,) log p(word | photo)
    removed: np.ndarray                    # (T,) log p(word | photo entirely hidden)
    random: np.ndarray                     # (T, L) rise, mean over the random orders
    curves: dict[str, np.ndarray] = field(default_factory=dict)   # method -> (T, L) rise, nats (NaN off `steps`)

    def auc(self, method: str | None = None) -> np.ndarray:
        """(T,) area under a method's insertion curve, or the random order's with method=None."""
        return auc(self.random if method is None else self.curves[method], self.levels)


def insertion(pipe: Pipeline, maps: dict[str, np.ndarray], levels=INSERT_LEVELS, random_draws: int = RANDOM_DRAWS,
              seed: int = 0, steps: list[int] | None = None, imputer: str = "blur") -> Insertion:
    """Insertion curves of each word's map for each method (and random orders, the floor).
    Levels 0 (the photo entirely hidden) and 1 (the photo: `pipe.base`) cost one pipeline run in all; the
    others (methods * words + draws) * their number."""
    rng = np.random.default_rng(seed)
    t_len = pipe.steps
    steps = list(range(t_len)) if steps is None else list(steps)
    mid = [f for f in levels if 0 < f < 1]
    rand_orders = np.stack([rng.permutation(GRID * GRID) for _ in range(random_draws)])
    blocks = [np.zeros((1, GRID, GRID), np.float32), 1 - keep_masks(rand_orders, mid).reshape(-1, GRID, GRID)]
    index = {}
    for m, mp in maps.items():
        orders = np.stack([order(mp[t], rng) for t in steps])
        index[m] = sum(len(b) for b in blocks)
        blocks.append(1 - keep_masks(orders, mid).reshape(-1, GRID, GRID))
    lp = pipe.whole_words(pipe.logprobs(torch.from_numpy(np.concatenate(blocks)), check_imputer(imputer)))
    lp = lp.numpy().astype(np.float64)
    base = pipe.whole_words(pipe.base()).numpy().astype(np.float64)
    removed = lp[0]

    def full(rise_mid: np.ndarray) -> np.ndarray:   # (T, len(mid)) -> (T, L) with the free ends
        cols, j = [], 0
        for f in levels:
            if f <= 0:
                cols.append(np.zeros(t_len))
            elif f >= 1:
                cols.append(base - removed)
            else:
                cols.append(rise_mid[:, j])
                j += 1
        return np.stack(cols, 1)

    n_rand = random_draws * len(mid)
    rand = (lp[1:1 + n_rand] - removed[None]).reshape(random_draws, len(mid), t_len).mean(0).T
    out = Insertion(pipe.words, tuple(levels), base, removed, full(rand))
    for m, start in index.items():
        rise = np.full((t_len, len(mid)), np.nan)
        rows = lp[start:start + len(steps) * len(mid)].reshape(len(steps), len(mid), t_len)
        for i, t in enumerate(steps):
            rise[t] = rows[i, :, t] - removed[t]
        curve = full(rise)
        curve[[t for t in range(t_len) if t not in steps]] = np.nan
        out.curves[m] = curve
    return out


SUN_PATCHES, SUN_TOP = 28, 20   # Sun et al. 2020: the top 20 of the 784 8x8 patches of the 224x224 input


def sun_ablation(pipe: Pipeline, maps: dict[str, np.ndarray], steps: list[int], settings, seed: int = 0) -> dict:
    """Sun et al.'s ablation (arXiv 2001.01037, as in their code): per word t and method, zero the
    top `SUN_TOP` of the input's 28x28 patches of 8x8 px in the map's order (a 14x14 cell is 2x2
    patches, ties broken at random), or in a random order, then (1) force the caption again: the
    word's log-prob drop (nats) and (2) decode the ablated photo anew (`settings`): does the caption
    still name the word's object? -> {step: {method | "random": {"drop", "gone"}}}."""
    from .grounding import word_class
    rng = np.random.default_rng(seed)
    names = [*maps, "random"]
    masks, index = [], []
    for t in steps:
        for m in names:
            score = rng.random(SUN_PATCHES ** 2) if m == "random" else np.kron(maps[m][t], np.ones((2, 2))).ravel()
            keep = np.ones(SUN_PATCHES ** 2, np.float32)
            keep[order(score, rng)[:SUN_TOP]] = 0.0
            masks.append(keep.reshape(SUN_PATCHES, SUN_PATCHES))
            index.append((t, m))
    keep = torch.from_numpy(np.stack(masks))
    lp = pipe.whole_words(pipe.logprobs(keep, "zero")).numpy()
    base = pipe.whole_words(pipe.base()).numpy()
    captions = pipe.captions(keep, "zero", settings)
    out: dict[int, dict] = {t: {} for t in steps}
    for i, (t, m) in enumerate(index):
        named = {word_class(w.text) for w in pipe.lm.vocab.word_spans(captions[i])}
        out[t][m] = {"drop": float(base[t] - lp[i, t]), "gone": word_class(pipe.words[t]) not in named}
    return out


def visual_dependence(pipe: Pipeline, imputer: str = "blur") -> np.ndarray:
    """(T,) each word's log p(word | photo) - log p(word | the photo entirely hidden: blurred away,
    or removed under `road`): how much it was seen rather than guessed from the words before it (a
    word of several tokens: at its first step, over all its tokens)."""
    return pipe.whole_words(pipe.base() - pipe.logprobs(torch.zeros(1, GRID, GRID), imputer)[0]).numpy()


def seen_dependence(pipe: Pipeline) -> np.ndarray:
    """(T,) the larger of the two visual dependences: the photo blurred away (colour and layout stay)
    and the photo removed (its mean colour, nothing of its layout): a figure, not the guessed verdict
    (a hidden photo is one no model was trained on: language_prior.py measures guessing instead)."""
    return np.maximum(visual_dependence(pipe, "blur"), visual_dependence(pipe, "road"))
