"""Explain a forced caption: every asked method's maps, normalised, and a trace that draws them."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...engine.images import AttendsTo, Photo
from ...engine.trace import AttentionTrace, TraceStep
from ...engine.vision import FeatureSource
from .maps import normalise, pool
from .methods import REGISTRY
from .pipeline import Pipeline

METHODS = tuple(REGISTRY)
METHOD_LABELS = {name: m.label for name, m in REGISTRY.items()}
DEFAULT_METHODS = ("attention", "occlusion", "gradcam")
FINE_SIDE = 112   # a fine (superpixel) map as a trace draws it: 2 px cells on the 224 input


@dataclass
class Explanation:
    """Per-word maps of one forced caption on one photo."""

    model: str
    words: list[str]                       # per step: its word's text at the word's first step, "" after
    logprobs: np.ndarray                   # (T,) each word's log-prob in the explained run
    maps: dict[str, np.ndarray]            # method -> (T, 14, 14) float32, >= 0, rows sum to 1 (or all 0)
    empty: dict[str, np.ndarray]           # method -> (T,) bool: no evidence, the map is all zero
    raw: dict[str, np.ndarray] = field(default_factory=dict)       # method -> raw scores, before clamping/normalising
    seconds: dict[str, float] = field(default_factory=dict)        # method -> wall time
    fine: dict[str, np.ndarray] = field(default_factory=dict)      # fine methods -> (T, FINE_SIDE, FINE_SIDE), sums 1

    def grid(self, method: str, t: int) -> np.ndarray:
        return self.maps[method][t]


def check_methods(methods) -> None:
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")


def available_methods(captioner, model: str) -> tuple[str, ...]:
    """The methods that apply to `model` here: attention only without a photo-space input
    (precomputed features, an imported grid encoder), relevancy only where its rules are written."""
    lm = captioner.model(model)
    photo = lm.image_encoder is not None or lm.vision_spec.source == FeatureSource.OURS
    return tuple(n for n, m in REGISTRY.items() if (photo or not m.photo_space) and m.applies(lm.model))


def explain(captioner, photo: Photo, model: str, caption, methods: tuple[str, ...] = DEFAULT_METHODS,
            pipe: Pipeline | None = None) -> Explanation:
    """Maps of what each word of `caption` (token ids, or text; forced) used on `photo`, per method."""
    check_methods(methods)
    pipe = pipe or Pipeline(captioner, photo, model, caption)
    out = Explanation(model, pipe.words, pipe.base().numpy(), {}, {})
    for name in methods:
        method = REGISTRY[name]
        start = time.perf_counter()
        raw = np.asarray(method.raw(pipe), np.float32)
        out.seconds[name] = time.perf_counter() - start
        out.raw[name] = raw
        if method.fine:
            out.fine[name] = normalise(pool(np.clip(raw, 0, None), FINE_SIDE))[0]
            raw = pool(np.clip(raw, 0, None))
        out.maps[name], out.empty[name] = normalise(raw)
    return out


def explained_trace(trace: AttentionTrace, explanation: Explanation, method: str) -> AttentionTrace:
    """`trace` with `method`'s map as each word's attention (on the 14x14 grid, or for superpixel
    methods the fine grid that follows the segments): every view, strip, GIF and figure then draws
    an explanation exactly as it draws attention. Words, probabilities and next words stay the
    model's own; the name says which map is shown."""
    maps = explanation.fine.get(method, explanation.maps[method])
    if len(maps) != len(trace.steps):
        raise ValueError(f"{method}: the explanation has {len(maps)} steps, the trace {len(trace.steps)}")
    steps = [TraceStep(s.word, s.token, s.logprob, maps[t].reshape(-1).astype(np.float32), s.alternatives, s.beta,
                       alternative_ids=s.alternative_ids) for t, s in enumerate(trace.steps)]
    return AttentionTrace(f"{trace.model} · {method}", AttendsTo.GRID, steps, trace.width, trace.height,
                          trace.image, trace.score, trace.finished, text=trace.text, pieces=trace.pieces,
                          word_spans=trace.word_spans)
