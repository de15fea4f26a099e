"""KernelSHAP (Lundberg and Lee 2017) on the superpixels' segments, with captum.attr.KernelShap:
the Shapley-value variant of superpixel ablation (coalitions of segments imputed together, a
weighted linear fit). Every word is fitted on the same seeded coalitions, so the photos run once
for all words (a forward cache keyed by the keep-mask)."""
from __future__ import annotations

import numpy as np
import torch

from .base import Method
from .superpixels import COMPACTNESS, SEGMENTS, keep_forward, segments

SAMPLES = 200   # coalitions (imputed photos) per caption


class KernelShap(Method):
    name, label, fine = "kernelshap", "KernelSHAP (superpixels)", True
    constants = {"samples": SAMPLES, "segments": SEGMENTS, "compactness": COMPACTNESS}
    cascade = False

    def raw(self, pipe, model=None):
        from captum.attr import KernelShap as CaptumKernelShap
        from ..pipeline import BATCH
        labels = torch.from_numpy(segments(pipe)).long()[None, None]
        out = np.zeros((pipe.steps, *labels.shape[-2:]), np.float32)
        with pipe.using(model):
            run, seen = keep_forward(pipe), {}

            def forward(keep: torch.Tensor) -> torch.Tensor:
                keys = [k.numpy().tobytes() for k in keep[:, 0, ::4, ::4].bool()]
                todo = [i for i, k in enumerate(keys) if k not in seen]
                if todo:
                    for i, row in zip(todo, run(keep[todo])):
                        seen[keys[i]] = row
                return torch.stack([seen[k] for k in keys])

            explainer = CaptumKernelShap(forward)
            for t in range(pipe.steps):
                with torch.random.fork_rng():
                    torch.manual_seed(pipe.seed)    # the same coalitions for every word
                    attr = explainer.attribute(torch.ones(labels.shape), baselines=0.0, target=t, feature_mask=labels,
                                               n_samples=SAMPLES, perturbations_per_eval=BATCH)
                out[t] = attr.reshape(labels.shape[-2:]).float().numpy()
        return out
