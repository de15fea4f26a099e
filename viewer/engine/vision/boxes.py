"""What a region model attends to: boxes with labels and scores, and the 5 context regions every
image has. Kept apart from the detector (regions.py) so reading regions never imports OpenCV."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _context_regions() -> dict[str, tuple[float, float, float, float]]:
    """The whole image and its quarters: regions every image has, so a photo with nothing
    detectable still has places to attend to, while the detections are the bulk of the list."""
    out = {"whole image": (0.0, 0.0, 1.0, 1.0)}
    for r, rname in enumerate(["top", "bottom"]):
        for c, cname in enumerate(["left", "right"]):
            out[f"quarter {rname} {cname}"] = (c / 2, r / 2, (c + 1) / 2, (r + 1) / 2)
    return out


CONTEXT = _context_regions()


@dataclass
class Regions:
    """Boxes (K, 4) normalised [x1, y1, x2, y2] on the model input, with their labels and scores.

    `features` is set only for precomputed regions (a user's Faster R-CNN files); ours are pooled
    from the grid when a batch is built (`region_features`).
    """

    boxes: np.ndarray
    labels: list[str]
    scores: np.ndarray
    features: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)
