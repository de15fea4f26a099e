"""Why is a caption wrong? Occlusion and attention sanity, computed from traces (grounding: `grounding.py`).

- occlusion: hide a cell or region from the model and decode again: the new caption, and how
  the probability of the original word at that step changed;
- sanity: per-step entropy, whether the maps barely move from word to word, coverage, and for
  hard attention how often the sampled cell was not alpha's argmax.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.images import GRID
from ..engine.trace import AttentionTrace


def sanity(trace: AttentionTrace, static_threshold: float = 0.9) -> dict:
    """Entropy per step, map-to-map similarity (a flag when attention hardly moves), coverage,
    and for hard attention how often the sample left the argmax cell."""
    maps = np.stack([s.attention for s in trace.steps]).astype(np.float64)
    unit = maps / np.linalg.norm(maps, axis=1, keepdims=True).clip(1e-12)
    sims = unit @ unit.T
    n = len(maps)
    mean_sim = float((sims.sum() - n) / (n * (n - 1))) if n > 1 else 1.0
    coverage = maps.sum(0)
    out = {"entropy": [round(s.entropy, 4) for s in trace.steps], "max_entropy": float(np.log(maps.shape[1])),
           "mean_pairwise_similarity": round(mean_sim, 4), "static": mean_sim > static_threshold,
           "coverage_max": round(float(coverage.max()), 4),
           "share_never_attended": round(float((coverage < 0.5 / maps.shape[1] * n).mean()), 4)}
    samples = [s.sample for s in trace.steps if s.sample is not None]
    if samples:
        left = [s.sample != int(np.argmax(s.attention)) for s in trace.steps if s.sample is not None]
        out["hard_left_argmax"] = round(float(np.mean(left)), 4)
    return out


@dataclass
class Occlusion:
    hidden: list[int]          # cell (row-major) or region indices hidden from the model
    step: int
    word: str
    prob_before: float
    prob_after: float
    new_caption: str


def occlude(captioner, photo, model: str, trace: AttentionTrace, step: int, hidden: list[int] | None = None,
            settings=None) -> Occlusion:
    """Hide cells/regions (default: the one most attended at `step`) and see what changes: the
    probability of the original word at that step (same words, teacher forced) and the new caption."""
    if hidden is None:
        hidden = [int(np.argmax(trace.steps[step].attention))]
    forced = captioner.force([photo], model, [trace.token_ids], hidden=[hidden])[0]
    fresh = captioner.caption([photo], model, settings, hidden=[hidden])[0][0]
    return Occlusion(hidden, step, trace.word_at(step).text, float(np.exp(trace.steps[step].logprob)),
                     float(np.exp(forced.steps[step].logprob)), fresh.caption)


def cell_at(x: float, y: float, width: int, height: int, grid: int = GRID) -> int:
    """The grid cell under a click at pixel (x, y) of the original photo."""
    col = min(grid - 1, max(0, int(x / width * grid)))
    row = min(grid - 1, max(0, int(y / height * grid)))
    return row * grid + col

