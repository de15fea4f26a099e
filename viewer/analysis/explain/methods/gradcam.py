"""Grad-CAM (Selvaraju et al. 2017) with captum.attr.LayerGradCam at the encoder's 14x14 output:
ReLU(sum_k mean_ij(d logp_t / dA_k) A_k). One backward for all words: the grid is repeated once per
word and row t explains word t. Region models: the gradient flows through the RoI pooling; `hf:`
models: A is the patch tokens (their rows' class-token half stays fixed), pooled onto 14x14."""
from __future__ import annotations

import torch
import torch.nn as nn

from ..maps import to_grid
from .base import Method


class _Tap(nn.Module):
    """Identity module holding the encoder's feature map (N, C, side, side): the layer Grad-CAM reads."""

    def forward(self, x):
        return x


def gradcam_maps(pipe, model=None, grid: torch.Tensor | None = None):
    from captum.attr import LayerGradCam
    tap = _Tap()
    g = (pipe.features.grid if grid is None else grid).float()
    rest = g[:, pipe.cam_dim:].to(pipe.device)
    fmap = g[:, :pipe.cam_dim].T.reshape(1, -1, pipe.side, pipe.side).expand(pipe.steps, -1, -1, -1).clone()

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = tap(x).flatten(2).transpose(1, 2)
        if rest.shape[1]:
            rows = torch.cat([rows.to(pipe.device), rest[None].expand(len(rows), -1, -1)], -1)
        return pipe.grid_logprobs(rows, model=model)

    with torch.enable_grad():
        cam = LayerGradCam(forward, tap).attribute(fmap, target=list(range(pipe.steps)), relu_attributions=True)
    return to_grid(cam.detach().reshape(pipe.steps, pipe.side, pipe.side).cpu().numpy())


class GradCam(Method):
    name, label = "gradcam", "Grad-CAM"

    def raw(self, pipe, model=None):
        return gradcam_maps(pipe, model)
