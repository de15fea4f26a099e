"""The small interface every per-word map method implements (one file per method, as Captum's
`attr/_core`); the registry is `methods/__init__.py`."""
from __future__ import annotations

import numpy as np
import torch.nn as nn


class Method:
    """`raw(pipe, model)` -> (T, 14, 14) raw scores for every step of the pipeline's forced caption,
    or (T, H, W) at the photo input's resolution for `fine` methods (pooled onto the grid for the
    metrics, drawn as they are). `model`: a decoder to explain instead of the pipeline's own (the
    randomisation check's copy)."""

    name: str = ""
    label: str = ""
    photo_space: bool = True   # needs the photo through an encoder here (attention does not)
    cascade: bool = True       # cheap enough to rerun at every stage of the randomisation check
    fine: bool = False         # maps at the photo input's resolution, segment by segment

    def applies(self, model: nn.Module) -> bool:
        return True

    def raw(self, pipe, model: nn.Module | None = None) -> np.ndarray:
        raise NotImplementedError
