"""Training data for COCO's world without COCO's pairs (docs/naming-objects.md, "Learning COCO's
world without COCO's pairs"): the uncaptioned COCO photos get the detector's labels, a seeded part
of them is kept out of training to choose on, a vocabulary is grown from caption text so a decoder
can say every COCO class, and each training photo gets pseudo-captions (Feng et al., CVPR 2019):
corpus captions whose object words are all among its labels.

Everything is decided from sorted photo ids and fixed seeds, so a rerun, or another listing order,
writes the same files. The labels are the slow part (the detector, about a quarter second a photo
on 2 cores): they are written a batch at a time, each batch atomically, so a killed run resumes.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

from .chair import COCO_CLASSES, mentions, singularize
from ..engine.images import ImageError, load_photo
from ..engine.vocab import Vocabulary, tokenize
from .datasets import read_flickr8k

SEED = 0
CHOICE_SIZE = 500     # photos kept out of training, to choose settings (the threshold first) on
THRESHOLD = 0.5       # detector score a label needs to count; the detector itself keeps >= 0.2
KEEP = 5              # pseudo-captions per photo, at most
MIN_COUNT = 5         # a word enters the vocabulary when the text says it this often (Flickr8k's rule)
BATCH = 100           # photos per labels file: what a kill can lose

# Class words whose plural the regular rule (constraints.plural) gets wrong, or that are plural already.
IRREGULAR_PLURALS = {"person": "people", "mouse": "mice", "knife": "knives", "sheep": "sheep",
                     "skis": "skis", "scissors": "scissors"}


def photo_id(path: str) -> str:
    """A photo's id: its file name without the extension (COCO_val2014_000000000042)."""
    return os.path.splitext(os.path.basename(path))[0]


def coco_photos(root: str) -> list[str]:
    """The photos `photos.txt` lists, under `images/`, in id order."""
    with open(os.path.join(root, "photos.txt"), encoding="utf-8") as f:
        names = [line.strip() for line in f if line.strip()]
    return sorted((os.path.join(root, "images", n) for n in names), key=photo_id)


def text_captions(root: str) -> list[str]:
    """The captions of a text-only folder: `captions.txt.gz`, lines `KEY<TAB>caption`."""
    with gzip.open(os.path.join(root, "captions.txt.gz"), "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 1)[1] for line in f if "\t" in line]


def flickr8k_train_captions(root: str) -> list[str]:
    data = read_flickr8k(root)
    return [c for path in data.split("train") for c in data.captions.get(path, [])]


def write_json(path: str, obj) -> None:
    """Write whole or not at all: a kill leaves the previous file (or none), never half of one."""
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def split(ids, choice_size: int = CHOICE_SIZE, seed: int = SEED) -> tuple[list[str], list[str]]:
    """(train, choice): a seeded draw of `choice_size` from the sorted ids, so it never depends on
    the order the photos were listed in."""
    ids = sorted(set(ids))
    if not 0 < choice_size < len(ids):
        raise ValueError(f"cannot keep {choice_size} of {len(ids)} photos out of training")
    choice = set(random.Random(seed).sample(ids, choice_size))
    return [i for i in ids if i not in choice], sorted(choice)


# --- the detector's labels ------------------------------------------------------------------------

def detections(regions) -> list[dict]:
    """A photo's detected COCO objects (the context regions left out), as JSON."""
    classes = set(COCO_CLASSES)
    return [{"label": label, "score": round(float(score), 4), "box": [round(float(v), 4) for v in box]}
            for label, score, box in zip(regions.labels, regions.scores, regions.boxes) if label in classes]


def load_labels(out: str) -> dict[str, list[dict]]:
    """photo id -> its detections, from every labels file written so far."""
    found = {}
    for path in sorted(glob.glob(os.path.join(out, "labels", "part-*.json"))):
        with open(path, encoding="utf-8") as f:
            found.update(json.load(f))
    return found


def label_photos(paths: list[str], detect, out: str, batch: int = BATCH, log=print) -> dict[str, list[dict]]:
    """Each listed photo's detections, running `detect` (uint8 RGB -> Regions) only on photos no labels
    file has yet; each batch is one new file under `out/labels/`, written atomically."""
    os.makedirs(os.path.join(out, "labels"), exist_ok=True)
    labels = load_labels(out)
    todo = [p for p in paths if photo_id(p) not in labels]
    log(f"labels: {len(paths) - len(todo)} of {len(paths)} photos labelled already, {len(todo)} to go")
    start, part = time.time(), len(glob.glob(os.path.join(out, "labels", "part-*.json")))
    for i in range(0, len(todo), batch):
        found = {}
        for path in todo[i:i + batch]:
            try:
                found[photo_id(path)] = detections(detect(load_photo(path).rgb))
            except ImageError as err:
                log(f"skipped {err}")
        write_json(os.path.join(out, "labels", f"part-{part:05d}.json"), found)
        labels.update(found)
        part += 1
        done = min(i + batch, len(todo))
        rate = done / max(time.time() - start, 1e-6)
        log(f"labels: {done}/{len(todo)} ({rate:.1f} photos/s, about {(len(todo) - done) / rate / 60:.0f} min left)")
    return {photo_id(p): labels[photo_id(p)] for p in paths if photo_id(p) in labels}


def labels_at(dets: list[dict], threshold: float) -> frozenset[str]:
    return frozenset(d["label"] for d in dets if d["score"] >= threshold)


# --- the vocabulary -------------------------------------------------------------------------------

def class_words() -> list[str]:
    """Every word of every COCO class name ("hot dog": hot, dog) and the plural of each name's last
    word ("hot dogs", "people"): the words a decoder needs to name and count COCO's objects."""
    from ..engine.constraints import plural   # here: constraints loads torch, and the CLI's parser reads this module
    words = set()
    for name in COCO_CLASSES:
        parts = name.split()
        words.update(parts)
        words.add(IRREGULAR_PLURALS.get(parts[-1]) or plural(parts[-1]))
    return sorted(words)


def vocabulary(captions: list[str], min_count: int = MIN_COUNT) -> tuple[Vocabulary, list[str]]:
    """The words said at least `min_count` times, then every class word the text said less often
    (appended, so the counted words keep their order): (the vocabulary, the words appended)."""
    counted = Vocabulary.build(captions, min_freq=min_count)
    added = [w for w in class_words() if w not in counted.index]
    return Vocabulary(counted.words + added), added


# --- pseudo-captions ------------------------------------------------------------------------------

class Corpus:
    """Captions indexed by the set of COCO classes they mention, so a photo's candidates are read
    from the subsets of its labels instead of scanning every caption."""

    def __init__(self, captions: list[str]):
        self.by_classes: dict[frozenset, list[str]] = defaultdict(list)
        seen = set()
        for caption in captions:
            words = tokenize(caption)
            classes = frozenset(m.coco_class for m in mentions(words))
            if classes and " ".join(words) not in seen:   # an object mention at least; a sentence once
                seen.add(" ".join(words))
                self.by_classes[classes].append(caption)
        self.largest = max(map(len, self.by_classes), default=0)

    def __len__(self) -> int:
        return sum(map(len, self.by_classes.values()))

    def best(self, labels: frozenset, keep: int, rng: random.Random) -> list[str]:
        """Up to `keep` captions naming only `labels`, those naming more of them first; among
        captions naming as many, a draw from `rng` (seeded per photo: deterministic, and two photos
        with the same labels need not get the same captions)."""
        chosen: list[str] = []
        for size in range(min(len(labels), self.largest), 0, -1):
            pool = [c for s in combinations(sorted(labels), size) for c in self.by_classes.get(frozenset(s), ())]
            chosen += rng.sample(pool, min(keep - len(chosen), len(pool)))
            if len(chosen) == keep:
                break
        return chosen


def pseudo_captions(ids: list[str], labels: dict[str, list[dict]], corpus: Corpus, threshold: float = THRESHOLD,
                    keep: int = KEEP, seed: int = SEED) -> dict[str, list[str]]:
    """photo id -> its pseudo-captions, for the photos of `ids` that get any."""
    out = {}
    for pid in sorted(ids):
        found = corpus.best(labels_at(labels.get(pid, []), threshold), keep, random.Random(f"{seed}:{pid}"))
        if found:
            out[pid] = found
    return out


# --- the whole build ------------------------------------------------------------------------------

def build(coco: str, coco_captions: str, flickr30k: str, flickr8k: str, out: str, detect, *,
          threshold: float = THRESHOLD, seed: int = SEED, choice_size: int = CHOICE_SIZE, keep: int = KEEP,
          min_count: int = MIN_COUNT, batch: int = BATCH, log=print) -> dict:
    """Labels, split, vocabulary and pseudo-captions into `out`; returns the report (report.json)."""
    os.makedirs(out, exist_ok=True)
    paths = coco_photos(coco)
    train, choice = split(map(photo_id, paths), choice_size, seed)
    write_json(os.path.join(out, "split.json"), {"seed": seed, "choice_size": choice_size,
                                                 "train": train, "choice": choice})
    coco_text, f30k_text = text_captions(coco_captions), text_captions(flickr30k)
    f8k_text = flickr8k_train_captions(flickr8k)
    vocab, added = vocabulary(f8k_text + coco_text + f30k_text, min_count)
    write_json(os.path.join(out, "vocab.json"), {"min_count": min_count, "words": vocab.words, "added": added,
                                                 "captions": {"flickr8k train": len(f8k_text), "coco": len(coco_text),
                                                              "flickr30k": len(f30k_text)}})
    labels = label_photos(paths, detect, out, batch, log)
    corpus = Corpus(coco_text + f30k_text)
    pseudo = pseudo_captions([i for i in train if i in labels], labels, corpus, threshold, keep, seed)
    write_json(os.path.join(out, "pseudo.json"), {"threshold": threshold, "keep": keep, "seed": seed,
                                                  "captions": pseudo})
    report = {"photos": len(paths), "photos labelled": len(labels), "train": len(train), "choice": len(choice),
              "vocabulary": len(vocab), "class words appended": len(added), "min count": min_count,
              "corpus captions with an object": len(corpus), "train photos with a pseudo-caption": len(pseudo),
              "pseudo-captions per train photo": round(sum(map(len, pseudo.values())) / max(len(train), 1), 3),
              "threshold": threshold, "keep": keep, "seed": seed}
    write_json(os.path.join(out, "report.json"), report)
    return report


# --- training on the pseudo-pairs -----------------------------------------------------------------

@dataclass
class PseudoPairs:
    """A world-data folder read for training: each COCO train photo's pseudo-captions and the
    classes the detector found on it (at the folder's threshold), and the grown vocabulary."""
    captions: dict[str, list[str]]       # photo path -> pseudo-captions
    labels: dict[str, frozenset[str]]    # photo path -> detected classes
    vocab: Vocabulary
    threshold: float


def pseudo_pairs(out: str, coco: str) -> PseudoPairs:
    """Read `out` (written by `build`) with the photos under `coco`; a choice-part photo among the
    pseudo-pairs is an error, never training data."""
    def read(name):
        with open(os.path.join(out, name), encoding="utf-8") as f:
            return json.load(f)
    try:
        pseudo, chosen, vocab = read("pseudo.json"), read("split.json"), read("vocab.json")
    except OSError as err:
        raise ValueError(f"{out}: not a world-data folder ({err.strerror}: {os.path.basename(err.filename)}); "
                         "`python -m viewer world-data` writes one") from None
    leaked = set(pseudo["captions"]) & set(chosen["choice"])
    if leaked:
        raise ValueError(f"{out}: {len(leaked)} photos of the choice part have pseudo-captions "
                         f"(e.g. {min(leaked)}): rebuild it")
    by_id = {photo_id(p): p for p in coco_photos(coco)}
    missing = [pid for pid in pseudo["captions"] if pid not in by_id]
    if missing:
        raise ValueError(f"{coco}: {len(missing)} photos of {out}'s pseudo-captions are not listed there "
                         f"(e.g. {missing[0]})")
    labels = load_labels(out)
    return PseudoPairs({by_id[pid]: caps for pid, caps in pseudo["captions"].items()},
                       {by_id[pid]: labels_at(labels.get(pid, []), pseudo["threshold"]) for pid in pseudo["captions"]},
                       Vocabulary(vocab["words"]), pseudo["threshold"])


def gate_weights(words: list[str], labels: frozenset[str], gate: float) -> list[float]:
    """Per word of a pseudo-caption, its weight in the loss (Honda et al. 2021's word-level gate):
    1 for the words of an object the detector found on the photo, `gate` for every other word, which
    the corpus caption may have said of another scene."""
    weights = [gate] * len(words)
    for m in mentions(words):
        if m.coco_class in labels:
            first = m.last - len(m.words.split()) + 1
            weights[first:m.last + 1] = [1.0] * (m.last + 1 - first)
    return weights
