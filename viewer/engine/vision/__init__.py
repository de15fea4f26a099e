"""Image features: the 14x14 grid encoder and the bottom-up region proposer, run together.

`VisionStack.extract` is the single place where photos become model inputs; the
feature cache used for training and the live pipeline both go through it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..images import AttendsTo, INPUT_SIZE, Photo, squash
from . import encoder, regions
from .boxes import Regions
from .spec import FeatureSource, VisionSpec

SPEC = VisionSpec(FeatureSource.OURS, {"preprocess": f"squash to {INPUT_SIZE}x{INPUT_SIZE} (PIL bicubic, no crop)",
                                       "encoder": encoder.SPEC, "detector": regions.SPEC})
SPEC_KEY = SPEC.key


@dataclass
class ImageFeatures:
    """What the decoders need from one photo: grid annotation vectors and detector regions."""

    grid: torch.Tensor | None         # (196, 1280), any float dtype, on CPU; None for precomputed regions
    regions: Regions | None = None    # None until a region model needs them


class VisionStack:
    """Grid encoder + region detector, loaded once."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.encoder = encoder.GridEncoder().to(self.device)
        self.detector = regions.RegionDetector()

    def extract(self, photos: list[Photo], with_regions: bool = True) -> list[ImageFeatures]:
        """Photos -> features: the squashed 224x224 input through the encoder (one call for the batch),
        the photo itself through the detector.

        Grid models need no detector, so `with_regions=False` skips it (about 75 ms a photo here).
        """
        grids = self.encoder(torch.from_numpy(np.stack([squash(p) for p in photos]))).cpu()
        return [ImageFeatures(g, self.detector.detect(p.rgb) if with_regions else None) for g, p in zip(grids, photos)]


def model_inputs(items: list[ImageFeatures], attends_to: AttendsTo, device: torch.device | str = "cpu",
                 labels: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch features for a decoder: (B, K, D) float32 and a (B, K) bool mask of real entries.
    `labels` (a model that `reads_labels`): each region row ends with its COCO class index
    (`regions.COCO_LABELS`; 0 for the context regions and anything else)."""
    if attends_to == AttendsTo.GRID:
        feats = torch.stack([it.grid for it in items]).to(device, torch.float32)
        return feats, torch.ones(feats.shape[:2], dtype=torch.bool, device=device)
    k = max(len(it.regions) for it in items)
    boxes = torch.zeros(len(items), k, 4)
    mask = torch.zeros(len(items), k, dtype=torch.bool)
    for i, it in enumerate(items):
        boxes[i, :len(it.regions)] = torch.from_numpy(it.regions.boxes)
        mask[i, :len(it.regions)] = True
    if items[0].regions.features is not None:        # precomputed (a user's Faster R-CNN features)
        feats = torch.zeros(len(items), k, items[0].regions.features.shape[1])
        for i, it in enumerate(items):
            feats[i, :len(it.regions)] = torch.from_numpy(it.regions.features)
        feats = feats.to(device)
    else:
        grid = torch.stack([it.grid for it in items]).to(device, torch.float32)
        feats = regions.region_features(grid, boxes.to(device))
    if labels:
        classes = torch.zeros(len(items), k, 1)
        for i, it in enumerate(items):
            classes[i, :len(it.regions), 0] = torch.tensor([regions.class_index(label) for label in it.regions.labels])
        feats = torch.cat([feats, classes.to(device)], dim=-1)
    return feats, mask.to(device)
