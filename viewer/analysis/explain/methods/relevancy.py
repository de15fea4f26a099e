"""Chefer et al. 2021 gradient-weighted attention relevancy, for the transformer decoder (its rules
are written for decoder layers with self- and cross-attention over the cells)."""
from __future__ import annotations

import copy

import torch

from ....engine.images import GRID
from .base import Method


def relevancy_maps(pipe: Pipeline, model: nn.Module | None = None) -> np.ndarray:
    """Chefer et al. 2021 for the transformer decoder: per layer, Abar = mean over heads of
    (grad * attention)^+; self-attention: R_tt += Abar R_tt, R_ti += Abar R_ti; cross-attention:
    R_ti += norm(R_tt) Abar_cross (the image side has no self-attention: R_ii = I). Row t of R_ti
    (the word t's query) is its map. Gradients of all words in one backward (one row per word)."""
    model = copy.deepcopy(pipe.model if model is None else model)   # its hooks must not catch other sessions' runs
    if not model.relevancy:
        raise ValueError(f"relevancy's rules are not written for {type(model).__name__} (the transformer without "
                         "encoder layers over the cells)")
    t_len = pipe.steps
    captured: list[tuple[str, torch.Tensor]] = []

    def hook(kind):
        def fn(module, args, out):
            out[1].retain_grad()
            captured.append((kind, out[1]))
        return fn

    handles = [h for layer in model.layers for h in (layer.self_attn.register_forward_hook(hook("self")),
                                                     layer.cross_attn.register_forward_hook(hook("cross")))]
    try:
        with torch.enable_grad():
            grid = pipe.features.grid.float()[None].expand(t_len, -1, -1)
            lp = pipe.grid_logprobs(grid, model=model)
            lp.diagonal().sum().backward()
    finally:
        for h in handles:
            h.remove()
    rows = torch.arange(t_len)
    r_tt = torch.eye(t_len).expand(t_len, -1, -1).clone()        # (row=word explained, T, T)
    r_ti = torch.zeros(t_len, t_len, GRID * GRID)
    for kind, a in captured:
        abar = (a.grad * a).clamp(min=0).mean(1).detach().float()   # (rows, T, S)
        if kind == "self":
            r_tt = r_tt + abar @ r_tt
            r_ti = r_ti + abar @ r_ti
        else:
            hat = r_tt - torch.eye(t_len)
            hat = hat / hat.sum(-1, keepdim=True).clamp_min(1e-12) + torch.eye(t_len)
            r_ti = r_ti + hat @ abar
    return r_ti[rows, rows].reshape(t_len, GRID, GRID).numpy()


class Relevancy(Method):
    name, label = "relevancy", "relevancy (Chefer et al.)"

    def applies(self, model):
        return bool(model.relevancy)

    def raw(self, pipe, model=None):
        return relevancy_maps(pipe, model)
