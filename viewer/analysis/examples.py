"""The example photos (assets/), captioned by every shipped captioning model as the app does (beam
3) and guided by the detector: which captions name only what the photo holds, against the COCO
classes a person listed by looking (assets/objects.json). `python -m viewer.analysis.examples`
writes reports/examples.json; the README's table is generated from it (tables.py)."""
from __future__ import annotations

import json
import os
import sys

from ..engine.decoding import DecodeSettings
from ..engine.images import load_photo
from ..paths import ASSETS, ROOT
from .guide import detected_words
from .hallucination import named

MODELS = ("sat-soft", "sat-hard", "transformer", "updown", "updown-copy")
OUT = os.path.join(ROOT, "reports", "examples.json")
SETTINGS = DecodeSettings(strategy="beam", beam_size=3)


def caption_examples(captioner, models: tuple[str, ...] = MODELS) -> dict:
    """Every example photo x model x (plain, guided): the caption, the classes it names and those of
    them the photo does not hold."""
    objects = json.load(open(os.path.join(ASSETS, "objects.json")))
    rows = []
    for name, there in sorted(objects["photos"].items()):
        photo = load_photo(os.path.join(ASSETS, name))
        required = detected_words(captioner.vision.detector.detect(photo.rgb))
        for model in models:
            for decoding, constraints in (("plain", None), ("guided", [required] if required else None)):
                trace = captioner.caption([photo], model, SETTINGS, constraints=constraints)[0][0]
                said = named(trace.caption)
                rows.append({"photo": name, "model": model, "decoding": decoding, "caption": trace.caption,
                             "required": [words[0] for words, _ in required] if constraints else [],
                             "named": sorted(said), "not_there": sorted(said - set(there))})
    return {"objects": objects, "decoding": "beam 3, as the app; guided: must name the detector's top classes "
            "(analysis/guide.py)", "captions": rows}


def main(argv: list[str] | None = None) -> int:
    from ..engine.pipeline import Captioner
    report = caption_examples(Captioner("cpu"))
    with open(OUT, "w") as f:
        json.dump(report, f, indent=1)
    bad = [r for r in report["captions"] if r["not_there"]]
    print(f"{len(report['captions']) - len(bad)} of {len(report['captions'])} captions name only what is there: {OUT}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
