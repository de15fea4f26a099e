"""Grounding against the user's own boxes: `evaluate --model M --boxes FILE.json [--explain METHODS]`.

FILE maps a photo path (relative paths are resolved against the JSON file's folder) to
``{"caption": "...", "boxes": {"dog": [[x1, y1, x2, y2], ...]}}`` in pixels of the ORIGINAL,
upright photo (EXIF rotation applied, as `images.load_photo` shows it). A word's value may also be
one box ``[x1, y1, x2, y2]``. Each caption is forced through the model; per method (`attention`
always, plus any of occlusion / gradcam / relevancy asked for) and per caption word that has boxes:
- pointing: the centre of the map's peak cell lies inside one of the word's boxes;
- mass in box: the map's weight inside the union of the word's boxes (a cell counts with the
  fraction of its area inside, `grounding.inside_fractions`);
beside the same baselines as the detector-box grounding (`grounding.py`): the centre pointer
(always points at the photo's centre), the uniform map's mass in box (~ the boxes' area), and
pointing on the off-centre words (whose boxes miss the centre, so the centre pointer scores 0).
Means carry image-level bootstrap 95% intervals (`grounding.bootstrap_ci`).

Every map is the 14x14 grid over the whole photo (`explain.py`; regions projected onto it), so
pixel boxes become the unit square by dividing by the photo's width and height.

Word matching (`match_key`): a caption word (the trace's word layer: a sub-word model's tokens
joined into words, grounded at the word's first token) matches a box key (lower-cased) exactly, or else after dropping a final "s", or else a
final "es" ("dogs" -> "dog", "boxes" -> "box"; "glasses" matches the key "glasses" exactly).
Irregular plurals ("mice", "people") need their own key. Every key must match at least one
caption word (the viewer's tokenizer: lower case, punctuation dropped), or the file is refused. A
caption word the model does not know is forced as <unk> and still grounded at its step; the report
lists such words (`unknown_to_model`).

An entry may instead ask a question of a question answering model (vqa-*):
``{"question": "what is the dog catching?", "answer": "frisbee", "boxes": {"frisbee": [...]}}``. The
answer is forced as the model's answer to the question and its map (the one the answer is read
from) is scored the same way, beside the same baselines; the box keys must name the answer.

A bad file raises ONE `BoxFileError` (a ValueError) whose message names the file, the photo and the
problem; nothing else escapes `load_box_file`.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..engine.images import GRID, ImageError, load_photo
from ..engine.vocab import tokenize
from .grounding import Grounding, bootstrap_ci, grid_units, ground_word, grounding_summary, word_forms

WORD_MATCHING = ('a caption word grounds against a box key that equals it (case-insensitive) or equals it '
                 'without a possessive or a plural "s" or "es" ("man\'s" -> "man", "dogs" -> "dog", "boxes" -> "box")')
EXTRA_METHODS = ("occlusion", "gradcam", "relevancy")


class BoxFileError(ValueError):
    """A boxes file that cannot be used; the message names the problem for the person who wrote it."""


@dataclass
class BoxedPhoto:
    """One entry of a boxes file, checked: the photo's resolved path, caption and pixel boxes."""

    key: str                          # the photo as written in the file
    path: str                         # resolved against the file's folder
    caption: str                      # the caption forced, or a question's answer
    boxes: dict[str, np.ndarray]      # key (lower case) -> (n, 4) pixel boxes on the original photo
    width: int
    height: int
    question: str | None = None       # a question answering entry: `caption` is its answer

    def unit_boxes(self, key: str) -> np.ndarray:
        """The key's boxes on the unit square of the photo (what the maps' cells are on)."""
        return self.boxes[key] / np.array([self.width, self.height, self.width, self.height], np.float64)


def match_key(word: str, keys) -> str | None:
    """The box key a caption word names: exact, else without a plural 's' / 'es'; None if none."""
    return next((c for c in word_forms(word) if c in keys), None)


# --------------------------------------------------------------------------------------------
# Reading and checking the file

def load_box_file(path: str, check_photos: bool = True) -> list[BoxedPhoto]:
    """Read and check a boxes file; raise one BoxFileError naming the first problem found.
    `check_photos` opens every photo (it must exist and be readable) to learn its size and check
    the boxes lie on it; without it sizes are 0 and boxes are not range-checked."""
    label = os.path.basename(path) or str(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise BoxFileError(f"{path}: no such boxes file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BoxFileError(f"{path}: cannot read the boxes file ({err})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise BoxFileError(f"{label}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    if not isinstance(data, dict):
        raise BoxFileError(f"{label}: the file must be a JSON object mapping photo paths to "
                           f'{{"caption": ..., "boxes": {{word: [[x1, y1, x2, y2], ...]}}}}, not a {_kind(data)}')
    if not data:
        raise BoxFileError(f"{label}: the file lists no photos")
    folder = os.path.dirname(os.path.abspath(path))
    return [_entry(label, folder, key, value, check_photos) for key, value in data.items()]


def _kind(value) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null", dict: "object"}.get(type(value), type(value).__name__)


def _entry(label: str, folder: str, key: str, value, check_photos: bool) -> BoxedPhoto:
    where = f"{label}: {key!r}"
    if not key.strip():
        raise BoxFileError(f"{label}: a photo path is empty")
    if not isinstance(value, dict):
        raise BoxFileError(f'{where}: must be an object {{"caption": ..., "boxes": ...}}, not a {_kind(value)}')
    asked = "question" in value
    fields = {"question", "answer", "boxes"} if asked else {"caption", "boxes"}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise BoxFileError(f"{where}: unknown field {unknown[0]!r} (only {', '.join(sorted(fields))})")
    what = "answer" if asked else "caption"
    caption = value.get(what)
    if caption is None:
        raise BoxFileError(f"{where}: missing \"{what}\"")
    if not isinstance(caption, str) or not tokenize(caption):
        raise BoxFileError(f"{where}: \"{what}\" must be a string with at least one word")
    question = value.get("question")
    if asked and (not isinstance(question, str) or not tokenize(question)):
        raise BoxFileError(f"{where}: \"question\" must be a string with at least one word")
    if "boxes" not in value:
        raise BoxFileError(f"{where}: missing \"boxes\"")
    raw = value["boxes"]
    if not isinstance(raw, dict) or not raw:
        raise BoxFileError(f"{where}: \"boxes\" must be a non-empty object mapping caption words to boxes")
    boxes: dict[str, np.ndarray] = {}
    for word, spec in raw.items():
        name = word.strip().lower()
        if not name:
            raise BoxFileError(f"{where}: a word in \"boxes\" is empty")
        if name in boxes:
            raise BoxFileError(f"{where}: the word {word!r} is given twice in \"boxes\"")
        boxes[name] = _boxes(f"{where}: boxes of {word!r}", spec)
    words = tokenize(caption) + re.findall(r"[a-z0-9]+(?:['’-][a-z0-9]+)+", caption.lower())   # "t-shirt" too
    for name in boxes:
        if not any(match_key(w, {name}) for w in words):
            raise BoxFileError(f"{where}: the word {name!r} in \"boxes\" is not in the {what} {caption!r} "
                               f"({WORD_MATCHING})")
    path = key if os.path.isabs(key) else os.path.join(folder, key)
    width = height = 0
    if check_photos:
        if not os.path.isfile(path):
            raise BoxFileError(f"{where}: the photo does not exist (looked for {path})")
        try:
            photo = load_photo(path)
        except ImageError as err:
            raise BoxFileError(f"{where}: {err}") from None
        width, height = photo.width, photo.height
        for name, b in boxes.items():
            bad = (b[:, 0] < 0) | (b[:, 1] < 0) | (b[:, 2] > width) | (b[:, 3] > height)
            if bad.any():
                raise BoxFileError(f"{where}: box {b[bad][0].tolist()} of {name!r} lies outside the "
                                   f"{width}x{height} photo (pixels: 0 <= x <= {width}, 0 <= y <= {height})")
    return BoxedPhoto(key, path, caption, boxes, width, height, question)


def _boxes(where: str, spec) -> np.ndarray:
    if isinstance(spec, list) and len(spec) == 4 and all(_number(v) for v in spec):
        spec = [spec]   # one box given without the outer list
    if not isinstance(spec, list) or not spec:
        raise BoxFileError(f"{where}: must be a non-empty list of [x1, y1, x2, y2] boxes")
    out = []
    for box in spec:
        if not (isinstance(box, list) and len(box) == 4 and all(_number(v) for v in box)):
            raise BoxFileError(f"{where}: {json.dumps(box)} is not a box [x1, y1, x2, y2] of 4 numbers")
        x1, y1, x2, y2 = (float(v) for v in box)
        if x2 <= x1 or y2 <= y1:
            raise BoxFileError(f"{where}: box {json.dumps(box)} is empty: it needs x2 > x1 and y2 > y1 "
                               "(corners [left, top, right, bottom] in pixels)")
        out.append([x1, y1, x2, y2])
    return np.array(out, np.float64)


def _number(v) -> bool:
    """A finite JSON number (a 400-digit integer is not: it has no float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


# --------------------------------------------------------------------------------------------
# Measuring

def ground_maps(words: list[str], maps: np.ndarray, photo: BoxedPhoto, image: int = 0) -> list[Grounding]:
    """Per caption word with boxes: pointing and mass in box of its map (row t of `maps`, (T, 14, 14)
    or (T, 196) over the photo's grid cells), and the centre and uniform baselines on the same word.
    `words` are per step the caption word starting there ("" where a word goes on, the word layer's
    `step_words`; <end> is ignored), so a word of several tokens is grounded once, at its first. An all-zero map (no evidence) has mass 0 and points nowhere (a miss)."""
    maps = np.asarray(maps, np.float64).reshape(len(maps), -1)
    units = grid_units(maps.shape[1])
    keys = [(t, word, match_key(word, photo.boxes)) for t, word in enumerate(words[:len(maps)])]
    return [ground_word(t, word, key, maps[t], units, photo.unit_boxes(key), image, size=(photo.width, photo.height))
            for t, word, key in keys if key]


SUMMARY_KEYS = ("words", "mass_in_box", "mass_in_box_ci", "mass_uniform_baseline", "box_area", "pointing",
                "pointing_ci", "pointing_centre_baseline", "pointing_centre_baseline_ci", "off_centre_words",
                "pointing_off_centre", "pointing_off_centre_ci")


def summarise(items: list[Grounding]) -> dict:
    """Means over the boxed words of one method (`grounding.grounding_summary`, without its
    detector-only and entropy figures), plus the centre baseline's own interval."""
    block = grounding_summary(items)
    block["words"] = block.pop("detected")
    block["pointing_centre_baseline_ci"] = bootstrap_ci([float(g.centre_hit) for g in items],
                                                        [g.image for g in items])
    return {k: block[k] for k in SUMMARY_KEYS}


def check_entries(captioner, model: str, photos: list[BoxedPhoto]) -> None:
    """Questions need a question answering model, captions a captioning one: one ValueError if not."""
    answers = captioner.model(model).model.answers
    wrong = next((bp for bp in photos if (bp.question is not None) != answers), None)
    if wrong is not None:
        raise ValueError(f"{wrong.key}: {'a question' if wrong.question else 'a caption'} in the boxes file, but "
                         f"{model} {'answers questions' if answers else 'captions'}; use "
                         f"{'a captioning' if answers else 'a question answering (vqa-*)'} model, or another file")


def check_methods(captioner, model: str, methods: Sequence[str]) -> tuple[str, ...]:
    """attention + the requested extra methods, in order, each available for this model; else ValueError."""
    from .explain import METHODS, available_methods
    wanted = ["attention"] + [m for m in dict.fromkeys(methods) if m != "attention"]
    unknown = [m for m in wanted if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    extra = [m for m in wanted if m != "attention"]
    if extra:
        have = available_methods(captioner, model)
        missing = [m for m in extra if m not in have]
        if missing:
            raise ValueError(f"{missing[0]} is not available for {model} (available: {', '.join(have)})")
    return tuple(wanted)


def boxed_record(captioner, model: str, methods: tuple[str, ...], bp: BoxedPhoto, index: int) -> dict:
    """One boxed photo's record: its caption forced, each method's groundings on its boxed words
    (`attention` from the forced trace: every model, regions projected onto the grid; the others by
    `explain.explain`, photo-space and slow), the per-word rows and each method's seconds."""
    from .explain import attention_grid, explain
    photo = load_photo(bp.path)
    start = time.perf_counter()
    trace = captioner.force([photo], model, [bp.caption], questions=None if bp.question is None else [bp.question])[0]
    words = trace.step_words()   # each caption word at its first token (the word layer)
    maps = {"attention": attention_grid(trace)}
    seconds = {"attention": time.perf_counter() - start}
    extra = [m for m in methods if m != "attention"]
    if extra:
        from .explain import Pipeline
        pipe = Pipeline(captioner, photo, model, trace.token_ids, question=bp.question)
        e = explain(captioner, photo, model, trace.token_ids, tuple(extra), pipe=pipe)
        for m in extra:
            maps[m] = e.maps[m]
            seconds[m] = e.seconds[m]
    found = {m: ground_maps(words, maps[m], bp, image=index) for m in methods}
    rows, unknown = [], []
    for j, g in enumerate(found["attention"]):
        word = trace.word_at(g.step)
        if not word.known:
            unknown.append(g.word)
        rows.append({"step": g.step, "word": g.word, "box_word": g.coco_class,
                     "model_word": g.word if word.known else "<unk>",
                     "model_tokens": [trace.steps[t].word for t in word.steps], "box_area": round(g.area, 4),
                     "centre_hit": g.centre_hit, "uniform_mass": round(g.uniform, 4),
                     "methods": {m: {"pointing": found[m][j].hit, "mass_in_box": round(found[m][j].inside, 4)}
                                 for m in methods}})
    return {"index": index, "id": bp.key, "grounding": {m: [asdict(g) for g in found[m]] for m in methods},
            "unknown": unknown, "seconds": seconds,
            "photo": {"photo": bp.key, "path": bp.path, "caption": bp.caption, "size": [bp.width, bp.height],
                      **({} if bp.question is None else {"question": bp.question}),
                      "words": rows}}


def reduce_boxes(records: list[dict], model: str, boxes_file: str, methods: tuple[str, ...]) -> dict:
    """The report from the boxed photos' records, sorted by index (see `evaluate_user_boxes`)."""
    records = sorted(records, key=lambda r: r["index"])
    ok = [r for r in records if "error" not in r]
    items = {m: [Grounding(**g) for r in ok for g in r["grounding"][m]] for m in methods}
    return {"model": model, "boxes_file": boxes_file, "photos": len(ok),
            "boxed_words": len(items["attention"]), "methods": list(methods),
            "word_matching": WORD_MATCHING,
            "grid": f"{GRID}x{GRID} cells over the whole photo; pixel boxes divided by the photo's width and height",
            "baselines": {"pointing_centre_baseline": "always points at the photo's centre",
                          "mass_uniform_baseline": "mass in box of a uniform map over the cells",
                          "pointing_off_centre": "pointing on the words whose boxes miss the centre "
                                                 "(the centre baseline scores 0 there)"},
            "intervals": "image-level bootstrap 95% (1000 resamples of photos)",
            "unknown_to_model": sorted({w for r in ok for w in r["unknown"]}),
            "grounding": {m: summarise(items[m]) for m in methods},
            "seconds": {m: round(sum(r["seconds"][m] for r in ok), 2) for m in methods},
            "per_photo": [r["photo"] for r in ok],
            "failed_photos": [{"id": r["id"], "error": r["error"]} for r in records if "error" in r]}


def evaluate_user_boxes(captioner, model: str, boxes_file: str, methods: Sequence[str] = ("attention",),
                        progress=None) -> dict:
    """Grounding of `model` against the user's boxes in `boxes_file` (see the module docstring), in
    this process: one `boxed_record` per photo, then `reduce_boxes`.

    `progress(i, n, photo_key)` is called before each photo. Raises BoxFileError for a bad file
    (before any model is run) and ValueError for an unknown or unavailable method. Returns a
    JSON-able dict: the model, counts, how words were matched and what the baselines are,
    `grounding[method]` (keys `SUMMARY_KEYS`), `seconds[method]`, and `per_photo` (each boxed word's
    step, box key, the model's word, box area, centre baseline hit, uniform mass, and per method its
    pointing hit and mass in box).
    """
    photos = load_box_file(boxes_file)
    check_entries(captioner, model, photos)
    methods = check_methods(captioner, model, methods)
    records = []
    for i, bp in enumerate(photos):
        if progress is not None:
            progress(i, len(photos), bp.key)
        records.append(boxed_record(captioner, model, methods, bp, i))
    return reduce_boxes(records, captioner.model(model).name, boxes_file, methods)
