"""The example photos (assets/), captioned by every shipped captioning model (beam 3) plain (as the
app starts), ruling out what the detector does not see, and also made to name its top classes:
which captions name only what the photo holds, against the COCO classes a person listed by looking
(assets/objects.json). `python -m viewer.analysis.examples` writes reports/examples.json; the
README's table is generated from it (tables.py)."""
from __future__ import annotations

import json
import os
import sys

from ..engine.checkpoints import shipped
from ..engine.decoding import DecodeSettings
from ..engine.images import load_photo
from ..paths import ASSETS, ROOT
from .guide import guidance, guided_settings
from .grounding import word_class
from .hallucination import named

OUT = os.path.join(ROOT, "reports", "examples.json")
SETTINGS = DecodeSettings(strategy="beam", beam_size=3)
# (name, must name the detector's top classes, rule out what it does not see); the app starts plain (app/ui.py)
DECODINGS = (("plain", False, False), ("ruled out", False, True), ("guided", True, True))
APP_DEFAULT = "plain"


def caption_examples(captioner, models: list[str] | None = None) -> dict:
    """Every example photo x model (default: the shipped captioners) x decoding (DECODINGS): the caption, the classes it names and those
    of them the photo does not hold."""
    objects = json.load(open(os.path.join(ASSETS, "objects.json")))
    models = models or shipped(captioner.checkpoint_dir)
    rows = []
    for name, there in sorted(objects["photos"].items()):
        photo = load_photo(os.path.join(ASSETS, name))
        regions = captioner.vision.detector.detect(photo.rgb)
        for model in models:
            required, unseen = guidance(captioner.model(model).vocab, regions)
            for decoding, name_detected, rule_out in DECODINGS:
                must = required if name_detected else []
                trace = captioner.caption([photo], model, guided_settings(SETTINGS) if rule_out else SETTINGS,
                                          constraints=[must] if must else None,
                                          avoid=[unseen] if rule_out else None)[0][0]
                said = named(trace.caption)
                rows.append({"photo": name, "model": model, "decoding": decoding, "caption": trace.caption,
                             "required": sorted({word_class(words[0]) for words, _ in must}),
                             "ruled_out": sorted({word_class(w) for w in unseen} - {None}) if rule_out else [],
                             "named": sorted(said), "not_there": sorted(said - set(there))})
    return {"objects": objects, "decoding": "beam 3; plain (the app's default); 'ruled out': never the words of a class "
            "the detector reliably finds when it finds none, nor <unk>; 'guided': also must name its top classes "
            "(analysis/guide.py)", "app_default": APP_DEFAULT, "captions": rows}


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
