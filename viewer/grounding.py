"""Grounding: how much of a word's attention lies on the thing the word names.

A word is grounded against boxes of the COCO class it names ("dogs" -> dog). Flickr8k has no
boxes, so the boxes are **proxies**: the COCO detector's boxes on the same photo (the regions in
the feature cache). Per word we measure
- mass in box: the attention weight inside the union of that class's boxes (each cell or region
  counts with the fraction of its area inside);
- box area: the union's share of the photo (what uniform attention would score);
- pointing: whether the centre of the most attended cell or region lies inside a box (beside it,
  the baseline that always points at the photo's centre, and pointing on the words whose boxes
  miss the centre, where that baseline scores 0);
- entropy of the word's attention (nats; uniform over K units is log K).
The same fractions are the targets of the attention supervision loss (`models.base`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data.vocab import tokenize
from .images import cell_boxes, grid_side
from .vision.regions import Regions

RASTER = 112   # side of the raster that box unions are drawn on
PROXY_BOXES = "proxy boxes: the COCO SSD detector's boxes of the named class on the same photo"

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


def union_mask(boxes: np.ndarray, size: int) -> np.ndarray:
    """Normalised boxes -> a size x size boolean raster of their union."""
    mask = np.zeros((size, size), bool)
    for x1, y1, x2, y2 in np.clip(np.asarray(boxes, np.float64).reshape(-1, 4), 0, 1):
        mask[int(np.floor(y1 * size)):int(np.ceil(y2 * size)), int(np.floor(x1 * size)):int(np.ceil(x2 * size))] = True
    return mask


def grid_units(cells: int) -> np.ndarray:
    """The cells of a square grid as normalised boxes, row-major."""
    return cell_boxes(1, 1, grid_side(cells))


def inside_fractions(units: np.ndarray, boxes: np.ndarray, raster: int = RASTER) -> np.ndarray:
    """(K,) the fraction of each unit's (cell's or region's) area inside the union of `boxes`."""
    inside = union_mask(boxes, raster).astype(np.float64)
    integral = np.pad(inside.cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    u = np.clip(np.asarray(units, np.float64), 0, 1)
    x1, y1 = np.floor(u[:, 0] * raster).astype(int), np.floor(u[:, 1] * raster).astype(int)
    x2 = np.maximum(np.ceil(u[:, 2] * raster).astype(int), x1 + 1).clip(max=raster)
    y2 = np.maximum(np.ceil(u[:, 3] * raster).astype(int), y1 + 1).clip(max=raster)
    x1, y1 = np.minimum(x1, x2 - 1), np.minimum(y1, y2 - 1)
    sums = integral[y2, x2] - integral[y1, x2] - integral[y2, x1] + integral[y1, x1]
    return sums / ((x2 - x1) * (y2 - y1))


def centre_inside(unit: np.ndarray, boxes: np.ndarray) -> bool:
    cx, cy = (unit[0] + unit[2]) / 2, (unit[1] + unit[3]) / 2
    b = np.asarray(boxes).reshape(-1, 4)
    return bool(((b[:, 0] <= cx) & (cx <= b[:, 2]) & (b[:, 1] <= cy) & (cy <= b[:, 3])).any())


def entropy(attention: np.ndarray) -> float:
    p = np.asarray(attention, np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@dataclass
class Grounding:
    """One word that names a COCO class; the numbers are None when the detector found no such object."""

    step: int
    word: str
    coco_class: str
    inside: float | None = None   # attention mass inside the class's boxes
    area: float | None = None     # the boxes' share of the photo
    hit: bool | None = None       # pointing game: the most attended unit's centre is inside a box
    centre_hit: bool | None = None  # the baseline that always points at the photo's centre


def ground_words(words: list[str], attention: np.ndarray, units: np.ndarray, regions: Regions) -> list[Grounding]:
    """Per object word: how much of its attention (row t of `attention`, over `units`) lies on its boxes."""
    labels = np.array(regions.labels)
    out = []
    for t, word in enumerate(words):
        cls = word_class(word)
        if cls is None:
            continue
        boxes = regions.boxes[labels == cls]
        if not len(boxes):
            out.append(Grounding(t, word, cls))
            continue
        a = attention[t]
        out.append(Grounding(t, word, cls, float((a * inside_fractions(units, boxes)).sum()),
                             float(union_mask(boxes, RASTER).mean()), centre_inside(units[int(np.argmax(a))], boxes),
                             centre_inside(np.array([0.5, 0.5, 0.5, 0.5]), boxes)))
    return out


def trace_units(trace) -> np.ndarray:
    """What a trace's attention is over, as normalised boxes: grid cells or the model's regions."""
    if trace.attends_to == "grid":
        return grid_units(len(trace.steps[0].attention))
    return np.asarray(trace.region_boxes)


def grounding(trace, regions: Regions) -> list[Grounding]:
    """Per object word of a trace's caption: how much of its attention lies on the detector's boxes of it."""
    attention = np.stack([s.attention for s in trace.steps])
    return ground_words([s.word for s in trace.steps], attention, trace_units(trace), regions)


def grounding_summary(items: list[Grounding]) -> dict:
    seen = [g.inside for g in items if g.inside is not None]
    return {"object_words": len(items), "detected": len(seen), "mean_inside": float(np.mean(seen)) if seen else None,
            "not_detected": [g.word for g in items if g.inside is None]}


def named_classes(references: list[str], min_refs: int = 2) -> set[str]:
    """The COCO classes that at least `min_refs` of a photo's reference captions name."""
    counts: dict[str, int] = {}
    for ref in references:
        for cls in {word_class(w) for w in tokenize(ref)} - {None}:
            counts[cls] = counts.get(cls, 0) + 1
    return {c for c, n in counts.items() if n >= min_refs}


def detector_recall(references: list[list[str]], regions: list[Regions]) -> float | None:
    """Over (photo, class named by its references): how often the detector found that class."""
    pairs = [(cls, reg) for refs, reg in zip(references, regions) for cls in named_classes(refs)]
    return round(float(np.mean([cls in reg.labels for cls, reg in pairs])), 4) if pairs else None


def grounding_block(samples) -> dict:
    """The grounding block of an evaluation, from (words, attention (T, K), units (K, 4), proxy
    regions) per decoded caption: means over every detected object word and over all words' entropy."""
    items, entropies, uniform = [], [], []
    for words, attention, units, regions in samples:
        attention = np.asarray(attention, np.float64)[:, :len(units)]   # batches pad regions; padding weighs 0
        items += ground_words(words, attention, units, regions)
        emitted = [a for a, w in zip(attention, words) if w != "<end>"]
        entropies += [entropy(a) for a in emitted]
        uniform += [float(np.log(len(units)))] * len(emitted)
    return corpus_grounding(items, entropies, uniform)


def corpus_grounding(items: list[Grounding], entropies: list[float], uniform: list[float]) -> dict:
    """Means over every detected object word of a split, and the words' mean entropy."""
    seen = [g for g in items if g.inside is not None]
    mean = (lambda xs: round(float(np.mean(xs)), 4) if xs else None)  # noqa: E731
    return {"object_words": len(items), "detected": len(seen),
            "mass_in_box": mean([g.inside for g in seen]), "box_area": mean([g.area for g in seen]),
            "pointing": mean([float(g.hit) for g in seen]),
            "pointing_centre_baseline": mean([float(g.centre_hit) for g in seen]),
            "pointing_off_centre": mean([float(g.hit) for g in seen if not g.centre_hit]),   # a centre prior scores 0
            "entropy": mean(entropies), "entropy_uniform": mean(uniform)}
