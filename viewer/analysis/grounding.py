"""Grounding: how much of a word's attention lies on the thing the word names.

A word is grounded against boxes of the COCO class it names ("dogs" -> dog). Flickr8k has no
boxes, so the boxes are **proxies**: the COCO detector's boxes on the same photo (the regions in
the feature cache). Per word we measure
- mass in box: the attention weight inside the union of that class's boxes (each cell or region
  counts with the fraction of its area inside);
- box area: the union's share of the photo (what uniform attention would score);
- pointing: whether the centre of the most attended cell or region lies inside a box (beside it,
  the baseline that always points at the photo's centre, and pointing on the words whose boxes
  miss the centre, where that baseline scores 0); beside the strict rule, TorchRay's pointing game
  tolerance (a hit within `TOLERANCE_PX` = 15 px of a box, in the photo's pixels), with the centre
  baseline under each rule and the ratio to it;
- entropy of the word's attention (nats; uniform over K units is log K).
Every figure stands beside baselines of the same kind on the same words: uniform attention over
the model's own units (its mass in box), always pointing at the centre, and the label-blind rule
"point at the highest-scoring detection" (which the proxy boxes favour, since they ARE detections);
hard attention also points with the cell it drew, region models also with the peak of the pixel
heatmap their views draw. Means come with image-level bootstrap 95% intervals (`bootstrap_ci`).
The same fractions are the targets of the attention supervision loss (`models.base`).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from ..engine.vocab import tokenize
from ..engine.images import AttendsTo, cell_boxes, grid_side
from ..engine.trace import entropy
from ..engine.vision.boxes import CONTEXT, Regions
from ..data.chair import CLASS_OF, mentions, singularize, word_classes

RASTER = 112   # side of the raster that box unions are drawn on
TOLERANCE_PX = 15   # TorchRay's pointing game: a peak within 15 px of the object's box is a hit
PROXY_BOXES = "proxy boxes: the COCO SSD detector's boxes of the named class on the same photo"

def word_forms(word: str) -> list[str]:
    """A caption word, lower case and without a possessive ("man's" -> 'man', "dogs'" -> 'dogs'), then
    its singular ('dogs' -> 'dog', 'benches' -> 'bench', 'puppies' -> 'puppy')."""
    w = re.sub(r"['’]s?$", "", word.lower())
    return list(dict.fromkeys((w, singularize(w))))


def word_class(word: str) -> str | None:
    """The COCO class a caption word names by CHAIR's published synonym list (chair.py: 'dogs' ->
    'dog', 'poodle' -> 'dog'), read alone; `chair.word_classes` reads a caption's words in context
    ("hot dog" is no dog), and every caption-level count uses it."""
    return next((CLASS_OF[c] for c in word_forms(word) if c in CLASS_OF), None)


def step_classes(words: list[str]) -> list[str | None]:
    """Per step of a caption (its word's text at the word's first step, "" after it), the COCO
    class the word names in context (`chair.word_classes`: "dog" of "hot dog" names none)."""
    said = [t for t, w in enumerate(words) if w]
    out: list[str | None] = [None] * len(words)
    for t, cls in zip(said, word_classes([words[t] for t in said])):
        out[t] = cls
    return out


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


CENTRE = np.array([0.5, 0.5, 0.5, 0.5])   # the photo's centre, as a zero-size box: the centre pointer


def centre_inside(unit: np.ndarray, boxes: np.ndarray, tolerance: tuple[float, float] = (0.0, 0.0)) -> bool:
    """Whether the unit's centre lies in a box, each box grown by `tolerance` (x, y; normalised)."""
    cx, cy = (unit[0] + unit[2]) / 2, (unit[1] + unit[3]) / 2
    b = np.asarray(boxes, np.float64).reshape(-1, 4) + np.array([-tolerance[0], -tolerance[1], tolerance[0], tolerance[1]])
    return bool(((b[:, 0] <= cx) & (cx <= b[:, 2]) & (b[:, 1] <= cy) & (cy <= b[:, 3])).any())


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
    uniform: float | None = None  # baseline: mass in box of uniform attention over the model's units
    top_detection_hit: bool | None = None   # baseline: pointing at the highest-scoring detection (label-blind)
    drawn_hit: bool | None = None   # hard attention: pointing with the cell it drew
    heatmap_hit: bool | None = None  # region models: pointing at the peak of the summed-weight heatmap
    image: int = 0                # which photo (for image-level bootstrap intervals)
    tolerant_hit: bool | None = None         # pointing within TOLERANCE_PX of a box (TorchRay)
    centre_tolerant_hit: bool | None = None  # the centre pointer under the same tolerance


def ground_words(words: list[str], attention: np.ndarray, units: np.ndarray, regions: Regions,
                 drawn: np.ndarray | None = None, heatmap: bool = False, image: int = 0, *,
                 size: tuple[int, int]) -> list[Grounding]:
    """Per object word: how much of its attention (row t of `attention`, over `units`) lies on its
    boxes, and the baselines on the same word. `drawn` (T,): hard attention's sampled cells;
    `heatmap`: also point at the peak of the summed region weights (region models); `size`: the
    photo's (width, height) in pixels, for the pointing tolerance."""
    labels = np.array(regions.labels)
    top = top_detection(regions)
    out = []
    for t, (word, cls) in enumerate(zip(words, step_classes(words))):
        if cls is None:
            continue
        boxes = regions.boxes[labels == cls]
        if not len(boxes):
            out.append(Grounding(t, word, cls, image=image))
            continue
        out.append(ground_word(t, word, cls, attention[t], units, boxes, image, top,
                               None if drawn is None else units[int(drawn[t])], heatmap, size=size))
    return out


def ground_word(t: int, word: str, name: str, a: np.ndarray, units: np.ndarray, boxes: np.ndarray, image: int = 0,
                top: np.ndarray | None = None, drawn_unit: np.ndarray | None = None, heatmap: bool = False, *,
                size: tuple[int, int]) -> Grounding:
    """One word's map `a` (over `units`) against the boxes of what it names: the mass inside, pointing
    (an all-zero map, no evidence, points nowhere), and on the same boxes the centre pointer, uniform
    mass, and (when given) the top detection, hard attention's drawn unit and the region heatmap's peak."""
    inside = inside_fractions(units, boxes)
    tol = (TOLERANCE_PX / max(size[0], 1), TOLERANCE_PX / max(size[1], 1))
    return Grounding(
        t, word, name, float((a * inside).sum()), float(union_mask(boxes, RASTER).mean()),
        bool(a.any()) and centre_inside(units[int(np.argmax(a))], boxes), centre_inside(CENTRE, boxes),
        uniform=float(inside.mean()), top_detection_hit=None if top is None else centre_inside(top, boxes),
        drawn_hit=None if drawn_unit is None else centre_inside(drawn_unit, boxes),
        heatmap_hit=centre_inside(heatmap_peak(units, a), boxes) if heatmap else None, image=image,
        tolerant_hit=bool(a.any()) and centre_inside(units[int(np.argmax(a))], boxes, tol),
        centre_tolerant_hit=centre_inside(CENTRE, boxes, tol))


def top_detection(regions: Regions) -> np.ndarray | None:
    """The box of the highest-scoring detection (context regions are not detections), or None."""
    found = [i for i, label in enumerate(regions.labels) if label not in CONTEXT]
    return None if not found else regions.boxes[max(found, key=lambda i: float(regions.scores[i]))]


def heatmap_peak(units: np.ndarray, weights: np.ndarray, raster: int = RASTER) -> np.ndarray:
    """The raster pixel (as a tiny box) where the units' weights, summed per pixel, peak: the
    brightest place of a region model's view."""
    total = np.zeros((raster, raster))
    for box, w in zip(np.clip(np.asarray(units, np.float64), 0, 1), weights):
        total += w * union_mask(box, raster)
    y, x = np.unravel_index(int(np.argmax(total)), total.shape)
    cx, cy = (x + 0.5) / raster, (y + 0.5) / raster
    return np.array([cx, cy, cx, cy])


def trace_units(trace) -> np.ndarray:
    """What a trace's attention is over, as normalised boxes: grid cells or the model's regions."""
    if trace.attends_to == AttendsTo.GRID:
        return grid_units(len(trace.steps[0].attention))
    return np.asarray(trace.region_boxes)


def trace_caption(trace, regions: Regions, image: int = 0) -> "Caption":
    """The `Caption` of a trace on photo `image`, against its proxy regions."""
    drawn = None if trace.steps[0].sample is None else np.array([s.sample for s in trace.steps])
    return Caption(image, trace.step_words(), np.stack([s.attention for s in trace.steps]),
                   trace_units(trace), regions, (trace.width, trace.height), drawn, trace.attends_to == AttendsTo.REGIONS)


def grounding(trace, regions: Regions) -> list[Grounding]:
    """Per object word of a trace's caption: how much of its attention lies on the detector's boxes of it."""
    attention = np.stack([s.attention for s in trace.steps])
    return ground_words(trace.step_words(), attention, trace_units(trace), regions, size=(trace.width, trace.height))


def named_classes(references: list[str], min_refs: int = 2) -> set[str]:
    """The COCO classes that at least `min_refs` of a photo's reference captions name."""
    counts: dict[str, int] = {}
    for ref in references:
        for cls in {m.coco_class for m in mentions(tokenize(ref))}:
            counts[cls] = counts.get(cls, 0) + 1
    return {c for c, n in counts.items() if n >= min_refs}


def detector_found(references: list[str], regions: Regions) -> list[bool]:
    """Per COCO class a photo's references name (`named_classes`): whether the detector found it."""
    return [cls in regions.labels for cls in sorted(named_classes(references))]


def detector_recall(found: list[bool]) -> float | None:
    """Over (photo, class named by its references): how often the detector found that class."""
    return round(float(np.mean(found)), 4) if found else None


class Caption(NamedTuple):
    """One decoded or forced caption, as grounding reads it."""
    image: int                  # which photo (captions of one photo share it)
    words: list[str]            # per step: its word's text at the word's first step, "" after (Word layer)
    attention: np.ndarray       # (T, K)
    units: np.ndarray           # (K, 4) normalised boxes of the cells or regions attended
    regions: Regions            # the proxy boxes
    size: tuple[int, int]       # the photo's (width, height) in pixels: the pointing tolerance is 15 px of it
    drawn: np.ndarray | None = None   # (T,) hard attention's sampled cells
    heatmap: bool = False       # region models: also point at the peak of the summed-weight heatmap


def caption_part(c: Caption) -> dict:
    """One caption's share of a grounding block, as JSON (a per-photo record holds these):
    its object words' groundings, and every emitted word's entropy with its uniform level."""
    attention = np.asarray(c.attention, np.float64)[:, :len(c.units)]   # batches pad regions; padding weighs 0
    emitted = [a for a, w in zip(attention, c.words) if w not in ("", "<end>")]   # one per word
    return {"items": [asdict(g) for g in ground_words(c.words, attention, c.units, c.regions, c.drawn, c.heatmap,
                                                      c.image, size=c.size)],
            "entropy": [entropy(a) for a in emitted], "uniform": [float(np.log(len(c.units)))] * len(emitted)}


def block_of(parts) -> dict:
    """The grounding block of many captions' parts (`caption_part`), in their order."""
    parts = list(parts)
    return grounding_summary([Grounding(**g) for p in parts for g in p["items"]],
                             [e for p in parts for e in p["entropy"]], [u for p in parts for u in p["uniform"]])


def grounding_block(captions) -> dict:
    """The grounding block of an evaluation from `Caption`s: means over every detected object word
    and over all words' entropy, with their baselines and bootstrap intervals."""
    return block_of(caption_part(c) for c in captions)


def bootstrap_ci(values, images, n: int = 1000, seed: int = 0) -> list[float] | None:
    """Image-level bootstrap 95% interval of the mean of `values` (one per word; `images` says
    whose photo each is): photos are resampled with replacement, their words kept together."""
    values, images = np.asarray(values, np.float64), np.asarray(images)
    if not len(values):
        return None
    ids, inverse = np.unique(images, return_inverse=True)
    sums, counts = np.bincount(inverse, values, len(ids)), np.bincount(inverse, minlength=len(ids))
    draw = np.random.default_rng(seed).integers(0, len(ids), (n, len(ids)))
    means = sums[draw].sum(1) / np.maximum(counts[draw].sum(1), 1)
    return [round(float(v), 4) for v in np.percentile(means, [2.5, 97.5])]


def grounding_summary(items: list[Grounding], entropies=(), uniform=()) -> dict:
    """Means over every detected object word (of one caption, or of a split) beside their chance
    levels (uniform mass, the centre and top-detection pointers), the words' mean entropy, and
    bootstrap intervals of the main means."""
    seen = [g for g in items if g.inside is not None]
    off = [g for g in seen if not g.centre_hit]
    mean = (lambda xs: round(float(np.mean(xs)), 4) if len(xs) else None)  # noqa: E731
    ci = (lambda gs, f: bootstrap_ci([f(g) for g in gs], [g.image for g in gs]))  # noqa: E731
    block = {"object_words": len(items), "detected": len(seen),
             "mass_in_box": mean([g.inside for g in seen]), "mass_in_box_ci": ci(seen, lambda g: g.inside),
             "mass_uniform_baseline": mean([g.uniform for g in seen]), "box_area": mean([g.area for g in seen]),
             "pointing": mean([float(g.hit) for g in seen]), "pointing_ci": ci(seen, lambda g: float(g.hit)),
             "pointing_centre_baseline": mean([float(g.centre_hit) for g in seen]),
             "pointing_top_detection_baseline": mean([float(g.top_detection_hit) for g in seen
                                                      if g.top_detection_hit is not None]),
             "off_centre_words": len(off),
             "pointing_off_centre": mean([float(g.hit) for g in off]),   # a centre prior scores 0
             "pointing_off_centre_ci": ci(off, lambda g: float(g.hit)),
             "pointing_off_centre_top_detection_baseline": mean([float(g.top_detection_hit) for g in off
                                                                 if g.top_detection_hit is not None]),
             "entropy": mean(entropies), "entropy_uniform": mean(uniform)}
    tolerant = [g for g in seen if g.tolerant_hit is not None]
    if tolerant:
        block["pointing_tolerant"] = mean([float(g.tolerant_hit) for g in tolerant])
        block["pointing_tolerant_ci"] = ci(tolerant, lambda g: float(g.tolerant_hit))
        block["pointing_tolerant_centre_baseline"] = mean([float(g.centre_tolerant_hit) for g in tolerant])
        block["tolerance_px"] = TOLERANCE_PX
    ratio = lambda a, b: round(a / b, 3) if a is not None and b else None  # noqa: E731
    block["pointing_to_centre"] = ratio(block["pointing"], block["pointing_centre_baseline"])
    if tolerant:
        block["pointing_tolerant_to_centre"] = ratio(block["pointing_tolerant"], block["pointing_tolerant_centre_baseline"])
    drawn = [g for g in seen if g.drawn_hit is not None]
    if drawn:
        block["pointing_drawn_cell"] = mean([float(g.drawn_hit) for g in drawn])
        block["pointing_drawn_cell_ci"] = ci(drawn, lambda g: float(g.drawn_hit))
    heat = [g for g in seen if g.heatmap_hit is not None]
    if heat:
        block["pointing_heatmap_peak"] = mean([float(g.heatmap_hit) for g in heat])
        block["pointing_heatmap_peak_ci"] = ci(heat, lambda g: float(g.heatmap_hit))
    return block
