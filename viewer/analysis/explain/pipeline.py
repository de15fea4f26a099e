"""One photo + one model + one forced caption: a photo with parts hidden -> every word's log-prob.

Every photo-space method (occlusion, superpixels) and every pixel metric (pixel_faithfulness.py)
goes through `Pipeline.logprobs`: keep-masks at any resolution (the 14x14 cells, or a superpixel's
pixels) say what stays; the rest becomes what the imputer gives (imputers.py: the blurred photo, or
ROAD's noisy linear imputation), and the whole pipeline runs again: the encoder (for region models
also the detector on the imputed photo and the RoI-pooled features), then the decoder teacher
forced on the same token ids (engine/forcing.py; sat-hard through its soft expectation).

Photo space is our encoder's 224x224 input, or for `hf:` models their own image processor's
input (the photo resized and normalised, imputed there: resizing and normalising are linear, so
keep-mask blends and linear imputation commute with them; ROAD's noise is scaled to the units).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageFilter

from ...engine.forcing import forced
from ...engine.images import INPUT_SIZE, AttendsTo, Photo, squash
from ...engine.pipeline import question_ids
from ...engine.vision import FeatureSource, ImageFeatures
from ...engine.vision.regions import DETECTOR_INPUT
from ...engine.words import first_step_words
from .imputers import BLUR_SIGMA, ROAD_NOISE, check_imputer, noisy_linear

BATCH = 32   # imputed photos per encoder call


class Pipeline:
    """One photo + one model + one forced caption: photo-space perturbations -> every word's log-prob.

    `logprobs(keep, imputer)`: keep (M, h, w) in [0, 1] (1 = the photo, 0 = imputed; any resolution,
    resized nearest) -> (M, T).
    `grid_logprobs(grid)`: encoder grids (N, 196, C) -> (N, T), differentiable (regions as detected
    on the unoccluded photo). T = the caption's steps, <end> included: `caption` is a trace's own
    token ids (forced as they are: nothing re-tokenises a decoded caption), or text tokenised once
    (`Captioner.forced_ids`: a reference, a typed caption). With `question`, a question answering
    model's answer (its token ids, then <end>) is the caption: every method explains the answer.
    """

    def __init__(self, captioner, photo: Photo, model: str, caption: str | Sequence[int],
                 blur_sigma: float = BLUR_SIGMA, seed: int = 0, question: str | None = None):
        self.captioner, self.photo = captioner, photo
        self.lm = lm = captioner.model(model)
        self.own_encoder = lm.image_encoder                      # hf: models: their ViT and image processor
        if lm.vision_spec.source != FeatureSource.OURS and self.own_encoder is None:
            raise ValueError(f"{lm.name} does not read photos through an encoder here: photo-space maps need one")
        self.model = lm.model.eval()
        self.regions_model = lm.attends_to == AttendsTo.REGIONS
        ids = captioner.forced_ids(model, caption) if isinstance(caption, str) else [int(i) for i in caption]
        self.token_ids = ids
        spans = lm.vocab.word_spans(ids)
        self.words = first_step_words(spans, len(ids))   # per step: its word at its first token
        self.spans = [w.steps for w in spans if len(w.steps) > 1 and w.steps.stop <= len(ids)]
        self.device = captioner.device
        self.tokens = torch.tensor(ids, device=self.device)
        self.prompt = None if question is None else question_ids(lm, [question], self.device)
        if self.own_encoder is None:
            sq = squash(photo)
            self.image = torch.from_numpy(sq).float()
            self.blurred = torch.from_numpy(_blur(sq, blur_sigma)).float()
            self.unit = 255.0                                  # one [0, 1] intensity step in these units
            self.zero = 127.5                                  # the encoder's normalised 0 ((x/255 - 0.5) / 0.5)
        else:                                                  # (H, W, 3), normalised by the processor
            pv = self.own_encoder.preprocess([photo])[0].float().cpu()
            self.image = pv.permute(1, 2, 0)
            self.blurred = _blur_tensor(pv, blur_sigma * pv.shape[-1] / INPUT_SIZE).permute(1, 2, 0)
            std = getattr(self.own_encoder.processor, "image_std", None)
            self.unit = float(1.0 / np.mean(std)) if std is not None else 1.0
            self.zero = 0.0                                    # the processor's output is already normalised
        self.features = captioner.inputs(lm, [photo])[0]       # cached grid (+ regions) of the photo
        self.side = math.isqrt(self.features.grid.shape[0])    # the model's grid: 14, or an hf: ViT's
        self.cam_dim = self.model.feature_width or self.features.grid.shape[-1]   # hf: rows' patch half
        if self.regions_model:
            self.small = _detector_copy(photo.rgb)
            self.small_blurred = _blur(self.small, blur_sigma * self.small.shape[1] / INPUT_SIZE)
        self.seed = seed                                       # ROAD's noise: the same draws for every map scored
        self._base: torch.Tensor | None = None

    @contextlib.contextmanager
    def using(self, model: nn.Module | None):
        """The pipeline with `model` as its decoder for a while (the randomisation check's copy)."""
        if model is None or model is self.model:
            yield self
            return
        original, base = self.model, self._base
        self.model, self._base = model, None
        try:
            yield self
        finally:
            self.model, self._base = original, base

    @property
    def steps(self) -> int:
        return len(self.token_ids)

    # -- the decoder, teacher forced -----------------------------------------------------------
    def decode(self, feats: torch.Tensor, mask: torch.Tensor, model: nn.Module | None = None,
               with_attention: bool = False):
        """Forced log-prob of every word (N, T) [and the attention (N, T, K)] for N feature rows
        (engine/forcing.py; sat-hard through its soft expectation)."""
        model = self.model if model is None else model
        out = forced(model, feats, mask, self.tokens[None].expand(feats.shape[0], -1), self.lm.vocab, soft=True,
                     prompt=None if self.prompt is None else self.prompt.expand(feats.shape[0], -1))
        return (out.logprobs, out.attention) if with_attention else out.logprobs

    def inputs_from_grid(self, grid: torch.Tensor, regions: list | None = None):
        """Decoder inputs from encoder grids (N, 196, C): the grid itself, or region features pooled
        from it (boxes: `regions` per row, default the unoccluded photo's)."""
        grid = grid.to(self.device, torch.float32)
        if not self.regions_model:
            return grid, torch.ones(grid.shape[:2], dtype=torch.bool, device=self.device)
        regions = regions or [self.features.regions] * len(grid)
        return self.lm.batch([ImageFeatures(g, r) for g, r in zip(grid, regions)], self.device)

    def grid_logprobs(self, grid: torch.Tensor, model: nn.Module | None = None) -> torch.Tensor:
        return self.decode(*self.inputs_from_grid(grid), model=model)

    # -- photo-space perturbations ----------------------------------------------------------------
    def logprobs(self, keep: torch.Tensor, imputer: str = "blur", batch: int = BATCH) -> torch.Tensor:
        """keep (M, h, w) or (M, 1, h, w) in [0, 1] -> every word's log-prob (M, T), no grad; the
        hidden part imputed by `imputer` (imputers.py; ROAD's noise seeded per mask by its index)."""
        with torch.inference_mode():
            return torch.cat([self.decode(feats, mask).cpu() for feats, mask in self.hidden_inputs(keep, imputer, batch)])

    def captions(self, keep: torch.Tensor, imputer: str, settings, batch: int = BATCH) -> list[list[int]]:
        """keep (M, h, w) -> the model's own caption (token ids) of each imputed photo, decoded anew
        with `settings` (Sun et al.'s ablation: does the word survive?)."""
        from ...engine.decoding import decode
        out = []
        for feats, mask in self.hidden_inputs(keep, imputer, batch):
            out += [h[0].tokens for h in decode(self.model, feats, mask, settings, self.lm.vocab)]
        return out

    def hidden_inputs(self, keep: torch.Tensor, imputer: str = "blur", batch: int = BATCH):
        """Decoder inputs (feats, mask), one batch at a time, of the photo with each keep-mask's
        hidden part imputed: the encoder, and for region models the detector, run on it."""
        check_imputer(imputer)
        keep = torch.as_tensor(keep).float().cpu()
        keep = keep.reshape(-1, *keep.shape[-2:])
        with torch.inference_mode():
            for i in range(0, len(keep), batch):
                k = keep[i:i + batch]
                grid = self.encode(self.imputed(self.image, self.blurred, k, imputer, i, self.unit, self.zero))
                regions = None
                if self.regions_model:
                    small = torch.from_numpy(self.small).float()
                    imgs = self.imputed(small, torch.from_numpy(self.small_blurred).float(), k, imputer, i, 255.0, 127.5)
                    regions = [self.captioner.vision.detector.detect(img.round().clamp(0, 255).to(torch.uint8).numpy())
                               for img in imgs]
                yield self.inputs_from_grid(grid, regions)

    def imputed(self, image: torch.Tensor, blurred: torch.Tensor, keep: torch.Tensor, imputer: str,
                first: int = 0, unit: float = 255.0, zero: float = 127.5) -> torch.Tensor:
        """(N, H, W, 3): `image` (H, W, 3; `unit` = one [0, 1] intensity step in its units) with each
        keep-mask's hidden part imputed."""
        px = resize_masks(keep, tuple(image.shape[:2]))[..., None]
        if imputer == "blur":
            return px * image + (1 - px) * blurred
        if imputer == "zero":
            return px * image + (1 - px) * zero
        filled = [noisy_linear(image.numpy(), m[..., 0].numpy(), ROAD_NOISE * unit, np.random.default_rng((self.seed, first + j)))
                  for j, m in enumerate(px)]
        return torch.from_numpy(np.stack(filled)).float()

    def encode(self, imgs: torch.Tensor) -> torch.Tensor:
        """Photo-space images (N, H, W, 3) -> the decoder's feature rows (N, K, C)."""
        if self.own_encoder is None:
            return self.captioner.vision.encoder(imgs)
        return self.own_encoder.encode(imgs.permute(0, 3, 1, 2).to(self.own_encoder.device))

    def whole_words(self, lp: torch.Tensor) -> torch.Tensor:
        """(..., T) per-token log-probs -> the same with each word's first step holding the sum over
        its tokens: a word's log-prob, which dependence, deletion, insertion and Sun's drop score."""
        out = torch.as_tensor(lp).clone()
        for steps in self.spans:
            out[..., steps.start] = torch.as_tensor(lp)[..., steps.start:steps.stop].sum(-1)
        return out

    def base(self) -> torch.Tensor:
        """(T,) every word's log-prob on the photo itself (cached features, no encoder run)."""
        if self._base is None:
            with torch.inference_mode():
                self._base = self.grid_logprobs(self.features.grid[None]).cpu()[0]
        return self._base

def _blur(rgb: np.ndarray, sigma: float) -> np.ndarray:
    return np.array(Image.fromarray(rgb).filter(ImageFilter.GaussianBlur(sigma)), dtype=np.uint8)


def _blur_tensor(img: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of a (3, H, W) tensor (the hf: image processor's output)."""
    from torchvision.transforms.functional import gaussian_blur
    size = min(2 * math.ceil(3 * sigma) + 1, 2 * (min(img.shape[-2:]) // 2) - 1)
    return gaussian_blur(img, [size, size], [sigma, sigma])


def _detector_copy(rgb: np.ndarray) -> np.ndarray:
    """The photo exactly as the detector shrinks it (regions.RegionDetector.detect), so hiding parts
    of this copy and detecting on it equals detecting on the hidden full photo, at 1/50 the cost."""
    import cv2
    h, w = rgb.shape[:2]
    scale = DETECTOR_INPUT / max(h, w)
    return cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))),
                      interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)


def resize_masks(keep: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Keep-masks (M, h, w) -> (M, H, W), nearest (a cell or a segment stays whole)."""
    return F.interpolate(keep[:, None].float(), size=size, mode="nearest")[:, 0]
