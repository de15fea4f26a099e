"""Occlusion (Zeiler and Fergus 2014) with captum.attr.Occlusion over a keep-mask of the 14x14
cells: where it is 0 the photo is blurred (imputers.py) and the whole pipeline runs again. The
forward returns every word's log-prob, so one batch of occluded photos scores all words (Captum's
multi-output mode). Windows at several scales (side, stride in cells), sliding; a cell's score is
Captum's average drop over the windows covering it, averaged over scales (clamped at 0 by
`normalise`: a patch that raises the word is no evidence for it). `occlusion` uses 4- and 6-cell
windows (45 photos), `occlusion-fine` 2- and 3-cell ones at stride 1 (313 photos)."""
from __future__ import annotations

import torch

from ....engine.images import GRID
from .base import Method


class Occlusion(Method):
    cascade = False   # a full occlusion run per randomised layer

    def __init__(self, name: str, label: str, scales: tuple[tuple[int, int], ...]):
        self.name, self.label, self.scales = name, label, scales

    def raw(self, pipe, model=None):
        from captum.attr import Occlusion as CaptumOcclusion
        with pipe.using(model):
            base = pipe.base()[None]

            def forward(keep: torch.Tensor) -> torch.Tensor:
                if keep.shape[0] == 1 and bool((keep == 1).all()):
                    return base                      # the unoccluded photo: already known
                return pipe.logprobs(keep)

            ones = torch.ones(1, 1, GRID, GRID)
            total = torch.zeros(pipe.steps, GRID, GRID)
            for side, stride in self.scales:
                n = ((GRID - side) // stride + 1) ** 2
                attr = CaptumOcclusion(forward).attribute(ones, baselines=0.0, sliding_window_shapes=(1, side, side),
                                                          strides=(1, stride, stride), perturbations_per_eval=n)
                total += attr.reshape(pipe.steps, GRID, GRID).float()
        return (total / len(self.scales)).numpy()
