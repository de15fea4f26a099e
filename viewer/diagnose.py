"""Why is a caption wrong? Grounding, occlusion and attention sanity, computed from traces.

- grounding: for a word that names a COCO class, the share of its attention mass inside the
  detector's boxes of that class (None when the detector found no such object: not seen);
- occlusion: hide a cell or region from the model and decode again: the new caption, and how
  the probability of the original word at that step changed;
- sanity: per-step entropy, whether the maps barely move from word to word, coverage, and for
  hard attention how often the sampled cell was not alpha's argmax.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .images import GRID, cell_boxes
from .trace import AttentionTrace
from .vision.regions import Regions

# caption word -> COCO class; plural forms are handled by `word_class`
SYNONYMS = {
    "man": "person", "men": "person", "woman": "person", "women": "person", "boy": "person", "girl": "person",
    "people": "person", "person": "person", "child": "person", "children": "person", "kid": "person",
    "baby": "person", "lady": "person", "guy": "person", "player": "person", "skier": "person",
    "surfer": "person", "biker": "person", "rider": "person", "climber": "person", "crowd": "person",
    "toddler": "person", "dog": "dog", "puppy": "dog", "cat": "cat", "kitten": "cat", "kitty": "cat",
    "bike": "bicycle", "bicycle": "bicycle", "motorcycle": "motorcycle", "motorbike": "motorcycle",
    "car": "car", "truck": "truck", "bus": "bus", "train": "train", "boat": "boat", "horse": "horse",
    "bird": "bird", "sheep": "sheep", "cow": "cow", "elephant": "elephant", "bear": "bear", "zebra": "zebra",
    "giraffe": "giraffe", "ball": "sports ball", "football": "sports ball", "soccer": "sports ball",
    "frisbee": "frisbee", "kite": "kite", "skateboard": "skateboard", "surfboard": "surfboard",
    "umbrella": "umbrella", "bench": "bench", "chair": "chair", "couch": "couch", "sofa": "couch",
    "bed": "bed", "table": "dining table", "cup": "cup", "mug": "cup", "bottle": "bottle", "bowl": "bowl",
    "pizza": "pizza", "cake": "cake", "laptop": "laptop", "computer": "laptop", "tv": "tv",
    "television": "tv", "phone": "cell phone", "book": "book", "clock": "clock", "vase": "vase",
    "backpack": "backpack", "handbag": "handbag", "purse": "handbag", "suitcase": "suitcase",
    "airplane": "airplane", "plane": "airplane", "skis": "skis", "snowboard": "snowboard", "tie": "tie",
}


def word_class(word: str) -> str | None:
    """The COCO class a caption word names, if any ('dogs' -> 'dog', 'puppy' -> 'dog')."""
    w = word.lower()
    for candidate in (w, w[:-1] if w.endswith("s") else None, w[:-2] if w.endswith("es") else None):
        if candidate and candidate in SYNONYMS:
            return SYNONYMS[candidate]
    return None


@dataclass
class Grounding:
    step: int
    word: str
    coco_class: str
    inside: float | None   # share of the word's attention inside boxes of that class; None: not detected


def _union_mask(boxes: np.ndarray, size: int) -> np.ndarray:
    """Normalised boxes -> a size x size boolean raster of their union."""
    mask = np.zeros((size, size), bool)
    for x1, y1, x2, y2 in np.clip(boxes, 0, 1):
        mask[int(np.floor(y1 * size)):int(np.ceil(y2 * size)), int(np.floor(x1 * size)):int(np.ceil(x2 * size))] = True
    return mask


def mass_inside(trace: AttentionTrace, t: int, target_boxes: np.ndarray, raster: int = 112) -> float:
    """Share of step t's attention inside the union of normalised boxes: each cell or region counts
    with its weight times the fraction of its area that lies inside."""
    if trace.attends_to == "grid":
        units = cell_boxes(1, 1, trace.grid_side)
    else:
        units = trace.region_boxes
    inside = _union_mask(target_boxes, raster)
    fractions = []
    for unit in units:
        area = _union_mask(unit[None], raster)
        fractions.append(inside[area].mean() if area.any() else 0.0)
    return float((trace.steps[t].attention * np.array(fractions)).sum())


def grounding(trace: AttentionTrace, regions: Regions) -> list[Grounding]:
    """Per object word of the caption: how much of its attention lies on the detector's boxes of it."""
    labels = np.array(regions.labels)
    out = []
    for t, step in enumerate(trace.steps):
        cls = word_class(step.word)
        if cls is None:
            continue
        boxes = regions.boxes[labels == cls]
        out.append(Grounding(t, step.word, cls, mass_inside(trace, t, boxes) if len(boxes) else None))
    return out


def grounding_summary(items: list[Grounding]) -> dict:
    seen = [g.inside for g in items if g.inside is not None]
    return {"object_words": len(items), "detected": len(seen), "mean_inside": float(np.mean(seen)) if seen else None,
            "not_detected": [g.word for g in items if g.inside is None]}


def sanity(trace: AttentionTrace, static_threshold: float = 0.9) -> dict:
    """Entropy per step, map-to-map similarity (a flag when attention hardly moves), coverage,
    and for hard attention how often the sample left the argmax cell."""
    maps = np.stack([s.attention for s in trace.steps]).astype(np.float64)
    unit = maps / np.linalg.norm(maps, axis=1, keepdims=True).clip(1e-12)
    sims = unit @ unit.T
    n = len(maps)
    mean_sim = float((sims.sum() - n) / (n * (n - 1))) if n > 1 else 1.0
    coverage = maps.sum(0)
    out = {"entropy": [round(s.entropy, 4) for s in trace.steps], "max_entropy": float(np.log(maps.shape[1])),
           "mean_pairwise_similarity": round(mean_sim, 4), "static": mean_sim > static_threshold,
           "coverage_max": round(float(coverage.max()), 4),
           "share_never_attended": round(float((coverage < 0.5 / maps.shape[1] * n).mean()), 4)}
    samples = [s.sample for s in trace.steps if s.sample is not None]
    if samples:
        left = [s.sample != int(np.argmax(s.attention)) for s in trace.steps if s.sample is not None]
        out["hard_left_argmax"] = round(float(np.mean(left)), 4)
    return out


@dataclass
class Occlusion:
    hidden: list[int]          # cell (row-major) or region indices hidden from the model
    step: int
    word: str
    prob_before: float
    prob_after: float
    new_caption: str


def occlude(captioner, photo, model: str, trace: AttentionTrace, step: int, hidden: list[int] | None = None,
            settings=None) -> Occlusion:
    """Hide cells/regions (default: the one most attended at `step`) and see what changes: the
    probability of the original word at that step (same words, teacher forced) and the new caption."""
    if hidden is None:
        hidden = [int(np.argmax(trace.steps[step].attention))]
    words = [s.word for s in trace.steps if s.word != "<end>"]
    forced = captioner.force([photo], model, [" ".join(words)], hidden=[hidden])[0]
    fresh = captioner.caption([photo], model, settings, hidden=[hidden])[0][0]
    return Occlusion(hidden, step, trace.steps[step].word, float(np.exp(trace.steps[step].logprob)),
                     float(np.exp(forced.steps[step].logprob)), fresh.caption)


def cell_at(x: float, y: float, width: int, height: int, grid: int = GRID) -> int:
    """The grid cell under a click at pixel (x, y) of the original photo."""
    col = min(grid - 1, max(0, int(x / width * grid)))
    row = min(grid - 1, max(0, int(y / height * grid)))
    return row * grid + col

