"""Per-word maps of what a caption word USED, beside where the model attended.

Every map is a 14x14 grid over the photo (the grid models' geometry, row-major cells in the
normalised frame of `images.cell_boxes`), non-negative and summing to 1, so one set of metrics
compares every method on every model. A word with no evidence at all (Grad-CAM all negative, no
patch lowers the word) gets an all-zero map and `empty[t] = True`; the metrics then rank its
cells at random (`pixel_faithfulness.order`).

Methods (`METHODS`):
- `attention`: the model's own map for the word, from the same teacher-forced run that is
  explained; region weights are projected onto the grid, each region's weight spread evenly over
  the cells of its box (render.region_density, the "coverage" view's drawing, reused).
- `occlusion`: photo-space sensitivity (Zeiler and Fergus 2014) with captum.attr.Occlusion. The
  perturbation is a keep-mask over the 14x14 cells: where it is 0 the PHOTO is replaced by a
  blurred copy, and the whole pipeline runs again (encoder; for region models also the detector
  on the occluded photo and the RoI-pooled features), teacher forced on the same caption. The
  forward returns every word's log-prob, so one batch of occluded photos scores all words
  (Captum's multi-output mode: attributions (T, ...)). Windows at several scales (`SCALES`,
  sliding); a cell's score is Captum's average drop over the windows covering it, averaged over
  scales, clamped at 0 (a patch that raises the word is no evidence for it).
- `gradcam`: Grad-CAM (Selvaraju et al. 2017) at the encoder's 14x14x1280 output with
  captum.attr.LayerGradCam; for region models the gradient flows through the RoI pooling.
- `relevancy` (transformer only): Chefer et al. 2021 gradient-weighted attention relevancy.

sat-hard (stochastic hard attention) is explained through its soft EXPECTATION: the context is
sum_i alpha_i a_i instead of a drawn cell (the deterministic variant its training uses for half
the images), so maps are smooth in the photo and need no seeds; its log-probs therefore differ
slightly from a hard forced decode's.

Photo space is our encoder's 224x224 input, or for `hf:` models their own image processor's
input (the photo resized and normalised, blurred there: both steps are linear, so keep-mask blends
commute with them). A model whose grid is not 14x14 (BLIP's 24x24, a tiny test ViT's 4x4) has its
attention and Grad-CAM maps area-pooled onto the 14x14 grid (`to_grid`). Models that read
precomputed features, or an imported grid encoder without a photo-space input, show attention only.
"""
from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageFilter

from ..engine.images import GRID, INPUT_SIZE, AttendsTo, Photo, squash
from ..engine.render import region_density
from ..engine.trace import AttentionTrace, TraceStep
from ..engine.vision import FeatureSource
from ..engine.vision.regions import DETECTOR_INPUT, region_features
from ..engine.forcing import forced
from ..engine.words import first_step_words

METHODS = ("attention", "occlusion", "gradcam", "relevancy")
SCALES = ((4, 2), (6, 4))   # occlusion windows (side, stride) in cells: 36 + 9 occluded photos
BLUR_SIGMA = 12.0           # px on the 224x224 input: the baseline the hidden patches take
BATCH = 32                  # occluded photos per encoder call


# --------------------------------------------------------------------------------------------
# The differentiable / batched pipeline for one photo and one forced caption

class Pipeline:
    """One photo + one model + one forced caption: photo-space perturbations -> every word's log-prob.

    `logprobs(keep)`: keep (M, 14, 14) in [0, 1] (1 = the photo, 0 = its blurred copy) -> (M, T).
    `grid_logprobs(grid)`: encoder grids (N, 196, C) -> (N, T), differentiable (regions as detected
    on the unoccluded photo). T = the caption's steps, <end> included: `caption` is a trace's own
    token ids (forced as they are: nothing re-tokenises a decoded caption), or text tokenised once
    (`Captioner.forced_ids`: a reference, a typed caption).
    """

    def __init__(self, captioner, photo: Photo, model: str, caption: str | Sequence[int],
                 blur_sigma: float = BLUR_SIGMA):
        self.captioner, self.photo = captioner, photo
        self.lm = lm = captioner.model(model)
        self.own_encoder = lm.image_encoder                      # hf: models: their ViT and image processor
        if lm.vision_spec.source != FeatureSource.OURS and self.own_encoder is None:
            raise ValueError(f"{lm.name} does not read photos through an encoder here: photo-space maps need one")
        self.model = lm.model.eval()
        self.regions_model = lm.attends_to == AttendsTo.REGIONS
        ids = captioner.forced_ids(model, caption) if isinstance(caption, str) else [int(i) for i in caption]
        self.token_ids = ids
        self.words = first_step_words(lm.vocab.word_spans(ids), len(ids))   # per step: its word at its first token
        self.device = captioner.device
        self.tokens = torch.tensor(ids, device=self.device)
        if self.own_encoder is None:
            sq = squash(photo)
            self.image = torch.from_numpy(sq).float()
            self.blurred = torch.from_numpy(_blur(sq, blur_sigma)).float()
        else:                                                  # (H, W, 3), normalised by the processor
            pv = self.own_encoder.preprocess([photo])[0].float().cpu()
            self.image = pv.permute(1, 2, 0)
            self.blurred = _blur_tensor(pv, blur_sigma * pv.shape[-1] / INPUT_SIZE).permute(1, 2, 0)
        self.features = captioner.inputs(lm, [photo])[0]       # cached grid (+ regions) of the photo
        self.side = math.isqrt(self.features.grid.shape[0])    # the model's grid: 14, or an hf: ViT's
        self.cam_dim = self.model.feature_width or self.features.grid.shape[-1]   # hf: rows' patch half
        if self.regions_model:
            self.small = _detector_copy(photo.rgb)
            self.small_blurred = _blur(self.small, blur_sigma * self.small.shape[1] / INPUT_SIZE)
        self._base: torch.Tensor | None = None

    @property
    def steps(self) -> int:
        return len(self.token_ids)

    # -- the decoder, teacher forced -----------------------------------------------------------
    def decode(self, feats: torch.Tensor, mask: torch.Tensor, model: nn.Module | None = None,
               with_attention: bool = False):
        """Forced log-prob of every word (N, T) [and the attention (N, T, K)] for N feature rows
        (engine/forcing.py; sat-hard through its soft expectation)."""
        model = self.model if model is None else model
        out = forced(model, feats, mask, self.tokens[None].expand(feats.shape[0], -1), self.lm.vocab, soft=True)
        return (out.logprobs, out.attention) if with_attention else out.logprobs

    def inputs_from_grid(self, grid: torch.Tensor, regions: list | None = None):
        """Decoder inputs from encoder grids (N, 196, C): the grid itself, or region features pooled
        from it (boxes: `regions` per row, default the unoccluded photo's)."""
        grid = grid.to(self.device, torch.float32)
        if not self.regions_model:
            return grid, torch.ones(grid.shape[:2], dtype=torch.bool, device=self.device)
        regions = regions or [self.features.regions] * len(grid)
        k = max(len(r) for r in regions)
        boxes = torch.zeros(len(grid), k, 4, device=self.device)
        mask = torch.zeros(len(grid), k, dtype=torch.bool, device=self.device)
        for i, r in enumerate(regions):
            boxes[i, :len(r)] = torch.from_numpy(r.boxes).to(self.device)
            mask[i, :len(r)] = True
        return region_features(grid, boxes), mask

    def grid_logprobs(self, grid: torch.Tensor, model: nn.Module | None = None) -> torch.Tensor:
        return self.decode(*self.inputs_from_grid(grid), model=model)

    # -- photo-space perturbations ----------------------------------------------------------------
    def logprobs(self, keep: torch.Tensor, batch: int = BATCH) -> torch.Tensor:
        """keep (M, 14, 14) or (M, 1, 14, 14) in [0, 1] -> every word's log-prob (M, T), no grad."""
        keep = keep.reshape(-1, GRID, GRID).float().cpu()
        out = []
        with torch.inference_mode():
            for i in range(0, len(keep), batch):
                k = keep[i:i + batch]
                px = F.interpolate(k[:, None], size=tuple(self.image.shape[:2]), mode="nearest")[:, 0, :, :, None]
                grid = self.encode(px * self.image + (1 - px) * self.blurred)
                regions = None
                if self.regions_model:
                    regions = [self._detect(m) for m in k.numpy()]
                out.append(self.decode(*self.inputs_from_grid(grid, regions)).cpu())
        return torch.cat(out)

    def encode(self, imgs: torch.Tensor) -> torch.Tensor:
        """Photo-space images (N, H, W, 3) -> the decoder's feature rows (N, K, C)."""
        if self.own_encoder is None:
            return self.captioner.vision.encoder(imgs)
        return self.own_encoder.encode(imgs.permute(0, 3, 1, 2).to(self.own_encoder.device))

    def base(self) -> torch.Tensor:
        """(T,) every word's log-prob on the photo itself (cached features, no encoder run)."""
        if self._base is None:
            with torch.inference_mode():
                self._base = self.grid_logprobs(self.features.grid[None]).cpu()[0]
        return self._base

    def _detect(self, keep: np.ndarray):
        h, w = self.small.shape[:2]
        m = np.asarray(Image.fromarray((keep * 255).astype(np.uint8)).resize((w, h), Image.Resampling.NEAREST))
        m = (m.astype(np.float32) / 255.0)[..., None]
        img = (m * self.small + (1 - m) * self.small_blurred).round().astype(np.uint8)
        return self.captioner.vision.detector.detect(img)


def _blur(rgb: np.ndarray, sigma: float) -> np.ndarray:
    return np.array(Image.fromarray(rgb).filter(ImageFilter.GaussianBlur(sigma)), dtype=np.uint8)


def _blur_tensor(img: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of a (3, H, W) tensor (the hf: image processor's output)."""
    from torchvision.transforms.functional import gaussian_blur
    size = min(2 * math.ceil(3 * sigma) + 1, 2 * (min(img.shape[-2:]) // 2) - 1)
    return gaussian_blur(img, [size, size], [sigma, sigma])


def _detector_copy(rgb: np.ndarray) -> np.ndarray:
    """The photo exactly as the detector shrinks it (regions.RegionDetector.detect), so occluding
    this copy and detecting on it equals detecting on the occluded full photo, at 1/50 the cost."""
    import cv2
    h, w = rgb.shape[:2]
    scale = DETECTOR_INPUT / max(h, w)
    return cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))),
                      interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)


# --------------------------------------------------------------------------------------------
# Maps

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


def attention_maps(pipe: Pipeline, model: nn.Module | None = None) -> np.ndarray:
    """The attention of the explained forward run, (T, 14, 14)."""
    with torch.inference_mode():
        _, att = pipe.decode(*pipe.inputs_from_grid(pipe.features.grid[None]), model=model, with_attention=True)
    att = att[0].double().cpu().numpy()
    if pipe.regions_model:
        regions = pipe.features.regions
        return project_regions(att[:, :len(regions)], regions.boxes)
    return to_grid(att.reshape(len(att), pipe.side, pipe.side))


def occlusion_maps(pipe: Pipeline, scales=SCALES) -> np.ndarray:
    """Raw occlusion scores (T, 14, 14) in nats, before clamping: captum Occlusion on the keep-mask."""
    from captum.attr import Occlusion
    base = pipe.base()[None]

    def forward(keep: torch.Tensor) -> torch.Tensor:
        if keep.shape[0] == 1 and bool((keep == 1).all()):
            return base                      # the unoccluded photo: already known (one per scale saved)
        return pipe.logprobs(keep)

    ones = torch.ones(1, 1, GRID, GRID)
    total = torch.zeros(pipe.steps, GRID, GRID)
    for side, stride in scales:
        n = ((GRID - side) // stride + 1) ** 2
        attr = Occlusion(forward).attribute(ones, baselines=0.0, sliding_window_shapes=(1, side, side),
                                            strides=(1, stride, stride), perturbations_per_eval=n)
        total += attr.reshape(pipe.steps, GRID, GRID).float()
    return (total / len(scales)).numpy()


class _Tap(nn.Module):
    """Identity module holding the encoder's feature map (N, C, 14, 14): the layer Grad-CAM reads."""

    def forward(self, x):
        return x


def gradcam_maps(pipe: Pipeline, model: nn.Module | None = None, grid: torch.Tensor | None = None) -> np.ndarray:
    """Raw Grad-CAM (T, 14, 14): ReLU(sum_k mean_ij(d logp_t / dA_k) A_k) at the encoder output.
    One backward for all words: the grid is repeated once per word and row t explains word t.
    For hf: models A is the patch tokens (their rows' class-token half stays fixed)."""
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


@dataclass
class Explanation:
    """Per-word maps of one forced caption on one photo."""

    model: str
    words: list[str]                       # per step: its word's text at the word's first step, "" after
    logprobs: np.ndarray                   # (T,) each word's log-prob in the explained run
    maps: dict[str, np.ndarray]            # method -> (T, 14, 14) float32, >= 0, rows sum to 1 (or all 0)
    empty: dict[str, np.ndarray]           # method -> (T,) bool: no evidence, the map is all zero
    raw: dict[str, np.ndarray] = field(default_factory=dict)       # method -> (T, 14, 14) before clamping/normalising
    seconds: dict[str, float] = field(default_factory=dict)        # method -> wall time

    def grid(self, method: str, t: int) -> np.ndarray:
        return self.maps[method][t]


def available_methods(captioner, model: str) -> tuple[str, ...]:
    lm = captioner.model(model)
    if lm.image_encoder is None and lm.vision_spec.source != FeatureSource.OURS:
        return ("attention",)   # no photo-space input here (precomputed features, an imported grid encoder)
    return METHODS if lm.model.relevancy else METHODS[:3]


def explain(captioner, photo: Photo, model: str, caption: str,
            methods: tuple[str, ...] = ("attention", "occlusion", "gradcam"), scales=SCALES,
            pipe: Pipeline | None = None) -> Explanation:
    """Maps of what each word of `caption` (forced) used on `photo`, per method (see METHODS)."""
    pipe = pipe or Pipeline(captioner, photo, model, caption)
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    compute = {"attention": lambda: attention_maps(pipe), "occlusion": lambda: occlusion_maps(pipe, scales),
               "gradcam": lambda: gradcam_maps(pipe), "relevancy": lambda: relevancy_maps(pipe)}
    out = Explanation(model, pipe.words, pipe.base().numpy(), {}, {})
    for m in methods:
        start = time.perf_counter()
        raw = compute[m]()
        out.seconds[m] = time.perf_counter() - start
        out.raw[m] = np.asarray(raw, np.float32)
        out.maps[m], out.empty[m] = normalise(raw)
    return out


# --------------------------------------------------------------------------------------------
# Sanity check (Adebayo et al. 2018): cascading randomisation of the decoder, top (output) down

def decoder_layers(model) -> list[tuple[str, nn.Module | nn.Parameter]]:
    """The decoder's parts from the output back to the input, as the model declares them (`cascade`)."""
    return model.cascade()


def _randomise(part, gen: torch.Generator):
    with torch.no_grad():
        params = [part] if isinstance(part, nn.Parameter) else list(part.parameters())
        for p in params:
            std = float(p.std()) if p.numel() > 1 else 0.02
            p.copy_(torch.randn(p.shape, generator=gen) * (std if std > 0 else 0.02))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr
    r = spearmanr(np.ravel(a), np.ravel(b)).statistic
    return 0.0 if np.isnan(r) else float(r)


def randomisation_check(captioner, photo: Photo, model: str, caption: str,
                        methods: tuple[str, ...] = ("attention", "gradcam"), seed: int = 0,
                        explanation: Explanation | None = None, pipe: Pipeline | None = None
                        ) -> list[tuple[str, dict[str, float]]]:
    """Per cascade stage (layers randomised so far, output first): each method's mean over words of
    the Spearman correlation between its maps before and after. Runs on a copy of the decoder;
    occlusion is allowed but costs a full occlusion run per stage."""
    pipe = pipe or Pipeline(captioner, photo, model, caption)
    before = explanation or explain(captioner, photo, model, caption, methods, pipe=pipe)
    rnd = copy.deepcopy(pipe.model).eval()
    gen = torch.Generator().manual_seed(seed)
    fns = {"attention": lambda m: attention_maps(pipe, m), "gradcam": lambda m: gradcam_maps(pipe, m),
           "relevancy": lambda m: relevancy_maps(pipe, m)}
    out = []
    original = pipe.model
    for name, part in decoder_layers(rnd):
        _randomise(part, gen)
        row = {}
        for m in methods:
            if m == "occlusion":
                pipe.model, pipe._base = rnd, None
                try:
                    after = occlusion_maps(pipe)
                finally:
                    pipe.model, pipe._base = original, None
            else:
                after = fns[m](rnd)
            after = normalise(after)[0]
            row[m] = float(np.mean([spearman(x, y) for x, y in zip(before.maps[m], after)]))
        out.append((name, row))
    return out


METHOD_LABELS = {"attention": "attention (where it looked)", "occlusion": "occlusion (what it needed)",
                 "gradcam": "Grad-CAM", "relevancy": "relevancy (Chefer et al.)"}


def explained_trace(trace: AttentionTrace, explanation: Explanation, method: str) -> AttentionTrace:
    """`trace` with `method`'s map as each word's attention, on the 14x14 grid: every view, strip,
    GIF and figure then draws an explanation exactly as it draws attention. Words, probabilities
    and next words stay the model's own; the name says which map is shown."""
    maps = explanation.maps[method]
    if len(maps) != len(trace.steps):
        raise ValueError(f"{method}: the explanation has {len(maps)} steps, the trace {len(trace.steps)}")
    steps = [TraceStep(s.word, s.token, s.logprob, maps[t].reshape(-1).astype(np.float32), s.alternatives, s.beta,
                       alternative_ids=s.alternative_ids) for t, s in enumerate(trace.steps)]
    return AttentionTrace(f"{trace.model} · {method}", AttendsTo.GRID, steps, trace.width, trace.height,
                          trace.image, trace.score, trace.finished, text=trace.text, pieces=trace.pieces,
                          word_spans=trace.word_spans)
