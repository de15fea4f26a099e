"""Every method's maps on one footing: a 14x14 grid over the photo (the grid models' geometry,
row-major cells in the normalised frame of `images.cell_boxes`), non-negative, each word's map
summing to 1, so one set of metrics compares every method on every model. A word with no evidence
at all gets an all-zero map (`empty`); the metrics then rank its cells at random.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ...engine.images import GRID, AttendsTo
from ...engine.render import region_density


def normalise(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 14, 14) raw scores -> clamped at 0, each word's map summing to 1; all-zero where a word
    has no positive evidence (returned as `empty`, (T,) bool)."""
    raw = np.clip(np.nan_to_num(np.asarray(raw, np.float64)), 0, None)
    total = raw.reshape(len(raw), -1).sum(1)
    empty = total <= 1e-12
    out = raw / np.where(empty, 1.0, total)[:, None, None]
    return out.astype(np.float32), empty


def project_regions(weights: np.ndarray, boxes: np.ndarray, grid: int = GRID, raster: int = 8) -> np.ndarray:
    """Region weights (T, K) with normalised boxes (K, 4) -> (T, grid, grid): each region's weight
    spread evenly over the cells of its box (drawn by render.region_density on a fine raster)."""
    side = grid * raster
    foot = np.stack([region_density(boxes[k:k + 1], [1.0], 1, 1, side, side) for k in range(len(boxes))])
    foot = foot / np.maximum(foot.reshape(len(boxes), -1).sum(1), 1e-12)[:, None, None]
    dens = np.tensordot(np.asarray(weights, np.float64)[:, :len(boxes)], foot, axes=1)   # (T, side, side)
    return dens.reshape(len(dens), grid, raster, grid, raster).sum((2, 4))


def to_grid(maps: np.ndarray) -> np.ndarray:
    """(T, s, s) maps on a model's own grid -> (T, 14, 14), area-pooled (unchanged when s = 14)."""
    maps = np.asarray(maps, np.float64)
    if maps.shape[-1] == GRID:
        return maps
    return F.adaptive_avg_pool2d(torch.from_numpy(maps)[:, None], GRID)[:, 0].numpy()


def attention_grid(trace) -> np.ndarray:
    """A trace's attention as (T, 14, 14) maps (regions projected onto the grid), rows summing to 1."""
    att = np.stack([s.attention for s in trace.steps]).astype(np.float64)
    if trace.attends_to == AttendsTo.REGIONS:
        return normalise(project_regions(att, np.asarray(trace.region_boxes)))[0]
    return normalise(to_grid(att.reshape(len(att), trace.grid_side, trace.grid_side)))[0]


def pool(fine: np.ndarray, side: int = GRID) -> np.ndarray:
    """(T, H, W) photo-resolution maps (superpixels) -> (T, side, side) by area, mass kept."""
    fine = torch.from_numpy(np.asarray(fine, np.float64))[:, None]
    return (F.adaptive_avg_pool2d(fine, side)[:, 0] * (fine.shape[-1] * fine.shape[-2] / side ** 2)).numpy()
