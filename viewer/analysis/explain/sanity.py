"""The sanity check of Adebayo et al. 2018: cascading randomisation of the decoder, from the output
down, in the order each model declares (`CaptionModel.cascade`, tied weights named with the stage
nearest the output). After each stage every method's maps are recomputed on the randomised copy
and compared with the maps from before by Spearman rank correlation. A map that turns constant
(all zero: no evidence left) has no rank correlation: it is counted apart, not as 0."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from ...engine.images import Photo
from .explanation import Explanation, explain
from .maps import normalise, pool
from .methods import REGISTRY
from .pipeline import Pipeline


@dataclass
class Stage:
    """One cascade stage: the layers randomised so far (output first) and, per method, the mean
    Spearman correlation over the words whose map is not constant, and how many maps are."""

    layers: str
    spearman: dict[str, float | None]
    constant: dict[str, int]
    words: int


def decoder_layers(model) -> list[tuple[str, nn.Module | nn.Parameter]]:
    """The decoder's parts from the output back to the input, as the model declares them (`cascade`)."""
    return model.cascade()


def _randomise(part, gen: torch.Generator):
    with torch.no_grad():
        params = [part] if isinstance(part, nn.Parameter) else list(part.parameters())
        for p in params:
            std = float(p.std()) if p.numel() > 1 else 0.02
            p.copy_(torch.randn(p.shape, generator=gen) * (std if std > 0 else 0.02))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr
    r = spearmanr(np.ravel(a), np.ravel(b)).statistic
    return 0.0 if np.isnan(r) else float(r)


def constant(m: np.ndarray) -> bool:
    return float(np.ptp(m)) < 1e-9


def randomisation_check(captioner, photo: Photo, model: str, caption, methods: tuple[str, ...] = ("attention", "gradcam"),
                        seed: int = 0, explanation: Explanation | None = None, pipe: Pipeline | None = None
                        ) -> list[Stage]:
    """Per cascade stage, each method's maps after against before (see the module docstring). Runs
    on a copy of the decoder; methods that are not `cascade`-cheap are allowed but cost a full run
    per stage."""
    pipe = pipe or Pipeline(captioner, photo, model, caption)
    before = explanation or explain(captioner, photo, model, caption, methods, pipe=pipe)
    rnd = copy.deepcopy(pipe.model).eval()
    gen = torch.Generator().manual_seed(seed)
    out = []
    for name, part in decoder_layers(rnd):
        _randomise(part, gen)
        rho, flat = {}, {}
        for m in methods:
            raw = np.asarray(REGISTRY[m].raw(pipe, rnd), np.float64)
            after = normalise(pool(np.clip(raw, 0, None)) if REGISTRY[m].fine else raw)[0]
            pairs = [(x, y) for x, y in zip(before.maps[m], after) if not constant(y) and not constant(x)]
            flat[m] = int(sum(constant(y) for y in after))
            rho[m] = float(np.mean([spearman(x, y) for x, y in pairs])) if pairs else None
        out.append(Stage(name, rho, flat, pipe.steps))
    return out
