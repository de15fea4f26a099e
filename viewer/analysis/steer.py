"""Steer the attention: make the model look at a chosen place for one word, and see what it says.

Occlusion (diagnose.py) hides a place and asks what the model loses; steering is its complement.
It replaces the model's attention at one step by a chosen map (models/base.py `steered`), keeps
every word before that step, and shows the next-word distribution under that map beside the
model's own, and the caption the model goes on to write from there.

The map depends on how the model attends (`steer_map`):
- soft grid models (sat-soft, transformer) get a Gaussian blob about a cell wide, normalised to
  sum 1: they were trained on smooth maps, and a blob stays closer to those than a one-cell spike;
- hard attention (sat-hard) always attends exactly one cell, so it gets a one-hot on that cell;
- region models (updown) get a one-hot on the chosen region: a region is already a whole object.
The transformer gets the map in every layer and head (models/transformer.py), so the map shown at
the steered step is exactly the one requested.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..engine.decoding import DecodeSettings
from ..engine.images import AttendsTo
from ..engine.trace import AttentionTrace


def steer_map(trace: AttentionTrace, unit: int, sigma: float = 1.0) -> np.ndarray:
    """The map that makes `trace`'s model look at `unit`: a cell (row-major) or a region index;
    `sigma` (in cells) is the blob's width for soft grid models."""
    n = len(trace.steps[0].attention)
    if not 0 <= unit < n:
        raise ValueError(f"no {trace.attends_to.unit} {unit}: there are {n}")
    if trace.attends_to == AttendsTo.REGIONS or trace.steps[0].sample is not None:
        return np.eye(n, dtype=np.float32)[unit]
    side = trace.grid_side
    rows, cols = np.divmod(np.arange(n), side)
    row, col = divmod(unit, side)
    blob = np.exp(-((rows - row) ** 2 + (cols - col) ** 2) / (2 * sigma ** 2))
    return (blob / blob.sum()).astype(np.float32)


@dataclass
class SteerResult:
    step: int
    word: str                          # the model's own word at `step`
    attention: np.ndarray              # the map it was made to attend there
    own: list[tuple[str, float]]       # its own top next words at `step`, best first
    steered: list[tuple[str, float]]   # the top next words under the steered map
    prob_before: float                 # p(word) under its own attention
    prob_after: float                  # p(word) under the steered map
    trace: AttentionTrace              # the decode from there: earlier words as before, `step` marked steered

    @property
    def caption(self) -> str:
        return self.trace.caption


def steer(captioner, photo, model: str, trace: AttentionTrace, step: int, attention: np.ndarray,
          settings: DecodeSettings | None = None, **search) -> SteerResult:
    """Make the model attend `attention` at `step` of `trace` (decoded with `settings`) and decode
    on from there; the words before `step` stay as they were. A forced trace stays forced: only its
    probabilities change. p(word) under the map comes from forcing the original words. `search`:
    what the trace's own decode was held to (`constraints`, `need`, `avoid` of `Captioner.caption`),
    kept for the continuation."""
    settings = settings or DecodeSettings()
    if not 0 <= step < len(trace.steps):
        raise ValueError(f"cannot steer word {step + 1}: the caption has {len(trace.steps)} (counting <end>)")
    words = trace.token_ids
    at = (step, [attention])
    forced = captioner.caption([photo], model, replace(settings, strategy="forced"), [words], steer=at)[0][0]
    fresh = forced if settings.strategy == "forced" else \
        captioner.caption([photo], model, settings, [words[:step]], steer=at, **search)[0][0]
    own = trace.steps[step]
    return SteerResult(step, trace.word_at(step).text, fresh.steps[step].attention, own.alternatives, fresh.steps[step].alternatives,
                       float(np.exp(own.logprob)), float(np.exp(forced.steps[step].logprob)), fresh)
