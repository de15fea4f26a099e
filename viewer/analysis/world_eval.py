"""Captions where there are no references: the COCO choice part (data/world.py), each caption
measured against the detector, since those photos have labels and no captions.

- proxy CHAIR: an object a caption names that the detector does not find on the photo even at its
  own floor (a score of 0.2), per mention (CHAIR_i) and per caption (CHAIR_s), with Rohrbach et al.'s
  word list (data/chair.py);
- recall: of the classes the detector is confident of (>= 0.5, the pseudo-captions' threshold),
  the share the caption names;

each with a 95% interval from a seeded bootstrap over the photos. The detector is this viewer's own,
so the measure is a proxy: it cannot see what the detector misses, and it rewards captions that say
what the detector says. Retrieval (no caption model: the corpus caption whose objects best match the
confident labels) is scored by the same measure beside the models.
"""
from __future__ import annotations

import random

import numpy as np

from ..data.world import Corpus, labels_at
from ..data.chair import mentions
from ..engine.vocab import tokenize

LOW = 0.2          # the detector's floor: a class it does not find even here counts as absent
CONFIDENT = 0.5    # a class it is this sure of counts as present (the pseudo-captions' threshold)
DRAWS = 1000


def photo_row(caption: str, detections: list[dict], low: float = LOW, confident: float = CONFIDENT) -> dict:
    """One caption against its photo's detections: the classes it names, those the detector does not
    find at `low`, and the confident classes it names."""
    said = [m.coco_class for m in mentions(tokenize(caption))]
    found, sure = labels_at(detections, low), labels_at(detections, confident)
    return {"caption": caption, "mentions": len(said), "unseen": sorted({c for c in said if c not in found}),
            "unseen_mentions": sum(c not in found for c in said),
            "confident": sorted(sure), "named": sorted(sure & set(said))}


def _ratios(rows: list[dict]) -> dict[str, float]:
    mentions_ = sum(r["mentions"] for r in rows)
    confident = sum(len(r["confident"]) for r in rows)
    return {"CHAIR_s": float(np.mean([bool(r["unseen"]) for r in rows])) if rows else 0.0,
            "CHAIR_i": sum(r["unseen_mentions"] for r in rows) / max(mentions_, 1),
            "recall": sum(len(r["named"]) for r in rows) / max(confident, 1)}


def proxy_block(rows: list[dict], seed: int = 0, draws: int = DRAWS) -> dict:
    """The three ratios over the photos, each with its bootstrap interval [2.5%, 97.5%]."""
    point = _ratios(rows)
    rng = random.Random(seed)
    samples = [_ratios([rows[rng.randrange(len(rows))] for _ in rows]) for _ in range(draws)] if rows else []
    out = {"photos": len(rows), "mentions": sum(r["mentions"] for r in rows)}
    for key, value in point.items():
        spread = [s[key] for s in samples] or [value]
        out[key] = round(value, 4)
        out[f"{key}_95"] = [round(float(np.percentile(spread, 2.5)), 4), round(float(np.percentile(spread, 97.5)), 4)]
    return out


def retrieval_captions(ids: list[str], labels: dict[str, list[dict]], corpus: Corpus,
                       threshold: float = CONFIDENT, seed: int = 0) -> dict[str, str]:
    """No caption model: for each photo the corpus caption naming the most of its confident classes
    and nothing else (`Corpus.best`, a seeded draw among equals); "" where none does."""
    out = {}
    for pid in ids:
        found = corpus.best(labels_at(labels.get(pid, []), threshold), 1, random.Random(f"{seed}:{pid}"))
        out[pid] = found[0] if found else ""
    return out
