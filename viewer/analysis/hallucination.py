"""Does a caption name what the photo holds? Object hallucination (CHAIR, Rohrbach et al., EMNLP
2018) and object recall, reported beside BLEU.

Caption words map to COCO classes as Rohrbach et al. publish it (`chair.py`: their synonym list,
two-word objects and rules). Without COCO's instance labels, the photo's reference captions stand in
for what is there, as Rohrbach et al. allow: a class is *there* when at least one reference names
it.
- CHAIR_i: the object mentions not there / all object mentions (each mention counts, as theirs).
- CHAIR_s: the captions that name at least one object not there / all captions.
- Object recall: of the classes at least `MOST` references name (what most people saw), the share
  the caption names.
Every figure has its image-level bootstrap 95% interval.
"""
from __future__ import annotations

import numpy as np

from ..engine.vocab import tokenize
from ..data.chair import mentions
from .grounding import bootstrap_ci, named_classes, step_classes, word_class

MOST = 2   # references that must name a class for recall to expect it (of Flickr8k's five)
GROUND_TRUTH = ("the photo's reference captions: a class is there when a reference names it (no instance labels; "
                "Rohrbach et al.'s caption ground truth); recall expects the classes at least "
                f"{MOST} references name; words map to COCO classes by Rohrbach et al.'s synonym list and rules "
                "(data/chair.py); CHAIR_i counts every mention")


def mentioned(caption: str) -> list[str]:
    """The COCO class of every object a caption mentions, in order (a class said twice, twice)."""
    return [m.coco_class for m in mentions(tokenize(caption))]


def named(caption: str) -> set[str]:
    """The COCO classes a caption names."""
    return set(mentioned(caption))


def caption_objects(caption: str, references: list[str]) -> dict:
    """One caption against its photo's references: what it mentions, the mentions of what is not
    there, and what most references name that it does not."""
    said, there, expected = mentioned(caption), set().union(*map(named, references)), named_classes(references, MOST)
    return {"named": said, "hallucinated": [c for c in said if c not in there], "expected": sorted(expected),
            "recalled": sorted(set(said) & expected)}


def hallucination_block(captions: dict[str, str], references: dict[str, list[str]]) -> dict:
    """CHAIR_i, CHAIR_s and object recall of captions by photo, with image-level 95% intervals and
    the photos whose captions name something not there."""
    rows = {photo: caption_objects(caption, references[photo]) for photo, caption in captions.items()}
    photos = list(rows)
    said = [(i, float(c in rows[p]["hallucinated"])) for i, p in enumerate(photos) for c in rows[p]["named"]]
    sentences = [(i, float(bool(rows[p]["hallucinated"]))) for i, p in enumerate(photos)]
    recall = [(i, float(c in rows[p]["recalled"])) for i, p in enumerate(photos) for c in rows[p]["expected"]]

    def figure(pairs):
        values = [v for _, v in pairs]
        return (round(sum(values) / len(values), 4) if values else None), bootstrap_ci(values, [i for i, _ in pairs])
    out = {"ground_truth": GROUND_TRUTH, "captions": len(photos), "object_mentions": len(said),
           "expected_objects": len(recall)}
    for name, pairs in (("chair_i", said), ("chair_s", sentences), ("object_recall", recall)):
        out[name], out[name + "_ci"] = figure(pairs)
    out["hallucinated"] = {p: r["hallucinated"] for p, r in rows.items() if r["hallucinated"]}
    return out


# The novel-object protocol's classes (Hendricks et al., CVPR 2016, held 8 COCO classes out): the 8
# that at least 2 references name on at least 4 dev-report photos, person, dog and ball aside (too
# common to hold out). `train --hold-out` drops their training captions; `novel_block` scores them.
NOVEL_CLASSES = ("bicycle", "skateboard", "car", "couch", "cat", "motorcycle", "frisbee", "bird")


def novel_block(captions: dict[str, str], references: dict[str, list[str]], classes=NOVEL_CLASSES) -> dict:
    """F1 of mentioning each class (DCC's metric): a photo is positive when at least `MOST`
    references name the class, a caption mentions it when one of its words names it."""
    out = {"classes": {}, "positive_when": f"at least {MOST} references name the class"}
    there = {p: named_classes(references[p], MOST) for p in captions}
    mentioned = {p: named(caption) for p, caption in captions.items()}
    for c in classes:
        positive = {p for p in captions if c in there[p]}
        said = {p for p in captions if c in mentioned[p]}
        hit = len(positive & said)
        precision = hit / len(said) if said else 0.0
        recall = hit / len(positive) if positive else 0.0
        f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
        out["classes"][c] = {"photos": len(positive), "mentioned": len(said), "both": hit,
                             "precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}
    out["mean_f1"] = round(float(np.mean([v["f1"] for v in out["classes"].values()])), 4) if classes else None
    return out


def why_unsupported(word: str, attention, units, regions, guessed: bool | None, cls: str | None = None) -> str | None:
    """Why an object word nothing supports (its class not detected) went wrong, or None when the
    detector found its class (or it names none): the model would have said it of most photos after
    the same words (`guessed`, language_prior.py: Rohrbach et al.'s language-prior failure), or its
    map's peak lies on a detected object of another class (a naming failure: "looked at a bear,
    said dogs"), or on nothing the detector found."""
    from ..engine.vision.boxes import CONTEXT
    from .grounding import centre_inside
    cls = cls or word_class(word)   # the class the caption's words name here (CHAIR's "hot dog" ends on "dog")
    if cls is None or cls in regions.labels:
        return None
    if guessed:
        return "said from the words before it: the model would have said it of most photos"
    peak = units[int(np.argmax(attention))]
    seen = [(float(s), label) for box, label, s in zip(regions.boxes, regions.labels, regions.scores)
            if label not in CONTEXT and centre_inside(peak, box[None])]
    if seen:
        label = max(seen)[1]
        return f"looked at {'an' if label[0] in 'aeiou' else 'a'} {label}, said {word}: a naming failure"
    return "looked at nothing the detector found"


def unsupported_words(caption, references: list[str], guessed=None) -> list[dict]:
    """The object words of a `grounding.Caption` that nothing supports (the detector did not find
    their class and no reference names it), each with `why_unsupported`'s cause; `guessed`: per
    step, would the model have said it of most photos, when measured (else never "said from the
    words before it")."""
    there = set().union(*map(named, references))
    out = []
    for t, (word, cls) in enumerate(zip(caption.words, step_classes(caption.words))):
        if cls is not None and cls not in caption.regions.labels and cls not in there:
            said = None if guessed is None else bool(guessed[t])
            out.append({"word": word, "step": t,
                        "why": why_unsupported(word, caption.attention[t], caption.units, caption.regions, said, cls)})
    return out


CAUSES = {"naming failure": "naming failure", "nothing detected": "looked at nothing", "said from the words before it":
          "said from the words"}


def unsupported_block(records: list[dict]) -> dict:
    """Why the unsupported object words of the records' captions went wrong: how many of each cause,
    with a few examples (word, cause, photo)."""
    words = [dict(w, image=r["id"]) for r in records for w in r.get("unsupported", [])]
    counts = {name: sum(key in w["why"] for w in words) for name, key in CAUSES.items()}
    return {"words": len(words), **counts, "said_of_most_photos": "not measured (evaluate reads cached features; "
            "triage and the app measure it)", "examples": [f"{w['word']}: {w['why']} ({w['image']})" for w in words[:10]]}
