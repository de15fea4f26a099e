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
    constants: dict = {}       # every module-level constant its maps depend on (records' fingerprints name them)

    def applies(self, model: nn.Module) -> bool:
        return True

    def settings(self) -> dict:
        """What its maps depend on besides the photo and the model: its constants and its own settings."""
        return {k: repr(v) for k, v in {**self.constants, **vars(self)}.items()}

    def raw(self, pipe, model: nn.Module | None = None) -> np.ndarray:
        raise NotImplementedError
