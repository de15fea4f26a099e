"""What a hidden part of the photo becomes: the two imputers every map is scored under.

- `blur`: the photo's Gaussian-blurred copy (sigma 12 px on the 224 input). Occlusion and the
  superpixel methods also build their maps with it, so scoring under it alone would grade them on
  their own answer.
- `zero`: the encoder's normalised input set to 0 (our encoder's mid grey; an `hf:` processor's
  normalised 0), as Sun et al. 2020 zero ablated patches; used by their ablation only.
- `road`: ROAD's noisy linear imputation (Rong et al. 2022): each hidden pixel becomes the
  weighted mean of its 8 neighbours (1/6 side, 1/12 diagonal), solved jointly for all hidden
  pixels as one sparse linear system, plus Gaussian noise. It follows pytorch-grad-cam's
  `metrics/road.py` `NoisyLinearImputer` (taken from the authors' road_evaluation code;
  tests/test_explain.py checks equality with it), with the system built in one vectorised step and
  solved by SuperLU with a symmetric ordering (the matrix is symmetric), 3x faster at 90% hidden.
  No method here optimises it. With nothing kept there is nothing to interpolate: the photo's mean
  colour, plus the noise.
"""
from __future__ import annotations

import numpy as np

IMPUTERS = ("blur", "road")          # every map is scored under these
ABLATION_IMPUTERS = IMPUTERS + ("zero",)
BLUR_SIGMA = 12.0           # px on the 224x224 input
ROAD_NOISE = 0.01 * 0.226   # ROAD's noise, 0.01 on ImageNet-normalised pixels, in [0, 1] intensity units
NEIGHBOURS = (((1, 1), 1 / 12), ((0, 1), 1 / 6), ((-1, 1), 1 / 12), ((1, -1), 1 / 12),
              ((0, -1), 1 / 6), ((-1, -1), 1 / 12), ((1, 0), 1 / 6), ((-1, 0), 1 / 6))
IMPUTER_SETTINGS = {   # every constant an imputer's pixels depend on (records' fingerprints name them)
    "blur": {"sigma_px_on_224": BLUR_SIGMA},
    "road": {"noise": ROAD_NOISE, "neighbours": repr(NEIGHBOURS), "noise_seed": "the pipeline's seed, per mask"},
    "zero": {"value": "the encoder's normalised 0"},
}


def check_imputer(name: str) -> str:
    if name not in ABLATION_IMPUTERS:
        raise ValueError(f"unknown imputer {name!r}; choose from {', '.join(ABLATION_IMPUTERS)}")
    return name


def noisy_linear(image: np.ndarray, keep: np.ndarray, noise: float = 0.0,
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """image (H, W, C), keep (H, W) (1 = kept, 0 = hidden) -> the image with every hidden pixel
    linearly imputed from its neighbours (+ N(0, noise^2) where `noise` > 0, in the image's units)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu
    h, w, c = image.shape
    flat = image.reshape(-1, c).astype(np.float64)
    hidden = np.flatnonzero(np.ravel(keep) < 0.5)
    out = flat.copy()
    if len(hidden) == len(flat):
        out[:] = flat.mean(0)
    elif len(hidden):
        index = np.full(h * w, -1)
        index[hidden] = np.arange(len(hidden))
        row, col = np.divmod(hidden, w)
        total = np.zeros(len(hidden))
        rows, cols, vals = [], [], []
        b = np.zeros((len(hidden), c))
        for (dr, dc), weight in NEIGHBOURS:
            r, q = row + dr, col + dc
            inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)
            total[inside] += weight
            eq, nb = np.flatnonzero(inside), r[inside] * w + q[inside]
            unknown = index[nb] >= 0
            rows.append(eq[unknown]), cols.append(index[nb[unknown]]), vals.append(np.full(int(unknown.sum()), weight))
            np.add.at(b, eq[~unknown], -weight * flat[nb[~unknown]])
        diag = np.arange(len(hidden))
        a = sp.csc_matrix((np.concatenate(vals + [-total]), (np.concatenate(rows + [diag]), np.concatenate(cols + [diag]))),
                          shape=(len(hidden), len(hidden)))
        out[hidden] = splu(a, permc_spec="MMD_AT_PLUS_A").solve(b)
    if noise > 0 and len(hidden):
        rng = rng or np.random.default_rng(0)
        out[hidden] += rng.normal(0.0, noise, (len(hidden), c))
    return out.reshape(h, w, c)
