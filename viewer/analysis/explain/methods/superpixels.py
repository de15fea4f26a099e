"""Superpixel ablation: maps that follow the objects' edges. The photo input is cut into SLIC
superpixels (scikit-image, `SEGMENTS` of them on the squashed 224x224 photo); each segment scores
the word's log-prob drop when that segment alone is imputed (blurred, as occlusion's cells are),
through captum.attr.FeatureAblation with the segments as its feature mask. Every pixel carries its
segment's score: drawn at the photo input's resolution, pooled onto the 14x14 grid for the metrics."""
from __future__ import annotations

import numpy as np
import torch

from ....engine.images import squash
from .base import Method

SEGMENTS = 60       # SLIC's target count (it returns about this many)
COMPACTNESS = 10.0  # SLIC's colour-versus-space trade-off (scikit-image's default)


def segments(pipe) -> np.ndarray:
    """(224, 224) int labels 0..S-1 of the pipeline's photo (cached on the pipeline)."""
    if getattr(pipe, "_segments", None) is None:
        from skimage.segmentation import slic
        pipe._segments = slic(squash(pipe.photo), n_segments=SEGMENTS, compactness=COMPACTNESS, start_label=0)
    return pipe._segments


def keep_forward(pipe):
    """Captum's forward over keep-masks (B, 1, H, W): every word's log-prob (B, T); the untouched photo is known."""
    base = pipe.base()[None]

    def forward(keep: torch.Tensor) -> torch.Tensor:
        if keep.shape[0] == 1 and bool((keep == 1).all()):
            return base
        return pipe.logprobs(keep[:, 0])
    return forward


class Superpixels(Method):
    name, label, fine = "superpixels", "superpixels (SLIC ablation)", True
    constants = {"segments": SEGMENTS, "compactness": COMPACTNESS}
    cascade = False   # a full ablation run per randomised layer

    def raw(self, pipe, model=None):
        from captum.attr import FeatureAblation
        from ..pipeline import BATCH
        labels = torch.from_numpy(segments(pipe)).long()[None, None]
        with pipe.using(model):
            attr = FeatureAblation(keep_forward(pipe)).attribute(torch.ones(labels.shape), baselines=0.0,
                                                                 feature_mask=labels, perturbations_per_eval=BATCH)
        return attr.reshape(pipe.steps, *labels.shape[-2:]).float().numpy()
