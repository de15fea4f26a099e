"""The model's own attention for each word, from the same teacher-forced run that is explained:
the baseline every other method is compared with. Region weights are projected onto the grid,
each region's weight spread evenly over the cells of its box (the "coverage" view's drawing)."""
from __future__ import annotations

import torch

from ..maps import project_regions, to_grid
from .base import Method


class Attention(Method):
    name, label, photo_space = "attention", "attention (where it looked)", False

    def raw(self, pipe, model=None):
        with torch.inference_mode():
            _, att = pipe.decode(*pipe.inputs_from_grid(pipe.features.grid[None]), model=model, with_attention=True)
        att = att[0].double().cpu().numpy()
        if pipe.regions_model:
            regions = pipe.features.regions
            return project_regions(att[:, :len(regions)], regions.boxes)
        return to_grid(att.reshape(len(att), pipe.side, pipe.side))
