"""Which classes guided decoding rules out when the detector keeps no box of them, chosen on
dev-select (the report half stays unseen): each candidate rule's CHAIR_s, object recall, BLEU-4 and
CIDEr for one model (beam 3), beside plain decoding and beside also requiring the top classes.
`python -m viewer.analysis.guide_choice` (`make guide-choice`, a few minutes) writes
reports/guide/choice.json; guide.py's RULE_OUT cites it."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

from ..engine.decoding import DecodeSettings
from ..paths import ROOT
from .evaluate import caption_text, guided_generate, score_captions
from .guide import MOST, NO_REPEAT, RULE_OUT, THRESHOLD
from .hallucination import hallucination_block, named

OUT = os.path.join(ROOT, "reports", "guide", "choice.json")
HALF = 0.5   # "found on half": the classes the detector finds on at least this share of the photos named
THRESHOLDS = (0.7, 0.8, 0.9)        # detection scores a required class needs
BLEU_LOSS, RECALL_LOSS = 0.5, 0.01  # what a rule may cost against plain decoding


def found_rate(data, cache, split: str = "train") -> dict[str, tuple[int, float]]:
    """Per class: the photos of `split` whose captions name it, and the share of them on which the
    detector keeps a box of it."""
    named_on, found = Counter(), Counter()
    for path in data.split(split):
        seen = set(cache.regions(path).labels)
        for c in set().union(*map(named, data.captions[path])):
            named_on[c] += 1
            found[c] += c in seen
    return {c: (n, round(found[c] / n, 3)) for c, n in named_on.items()}


def candidates(rates: dict[str, tuple[int, float]]) -> dict[str, dict | None]:
    """The rules compared: plain (and with no trigram twice); ruling out person only, the classes
    found on half the photos naming them (or named on under 10), every class (and with no trigram
    twice); every class with the top classes above each threshold required (and, at 0.7, with
    repeats allowed)."""
    half = [c for c in RULE_OUT if rates.get(c, (0, 0))[0] < 10 or rates[c][1] >= HALF]
    plain, every = {"threshold": THRESHOLD, "most": 0}, {"threshold": THRESHOLD, "most": 0, "rule_out": list(RULE_OUT)}
    once = f"no {NO_REPEAT}-gram twice"
    rules = {"plain": None, f"plain, {once}": {**plain, "no_repeat": NO_REPEAT},
             "rule out person": {**plain, "rule_out": ["person"]},
             f"rule out the classes found on >= {HALF:.0%} of the training photos naming them": {**plain, "rule_out": half},
             "rule out every class": every, f"rule out every class, {once}": {**every, "no_repeat": NO_REPEAT},
             "rule out every class, require the top classes >= 0.7": {**every, "threshold": 0.7, "most": MOST}}
    for threshold in THRESHOLDS:
        rules[f"rule out every class, require the top classes >= {threshold}, {once}"] = \
            {**every, "threshold": threshold, "most": MOST, "no_repeat": NO_REPEAT}
    return rules


def chosen(rows: list[dict]) -> str:
    """The rule with the lowest CHAIR_s of those that keep BLEU-4 within `BLEU_LOSS` and object
    recall within `RECALL_LOSS` of plain decoding (the issue's bar for shipping a model)."""
    plain = rows[0]
    kept = [r for r in rows[1:] if r["BLEU-4"] >= plain["BLEU-4"] - BLEU_LOSS
            and r["object_recall"] >= plain["object_recall"] - RECALL_LOSS]
    return min(kept, key=lambda r: r["chair_s"])["rule"] if kept else plain["rule"]


def main(argv: list[str] | None = None) -> int:
    from ..data.cache import FeatureCache
    from ..data.datasets import load_dataset
    from ..engine.pipeline import Captioner
    p = argparse.ArgumentParser(prog="python -m viewer.analysis.guide_choice", description=__doc__)
    p.add_argument("--data", required=True, help="the Flickr8k folder")
    p.add_argument("--model", default="updown")
    p.add_argument("--split", default="dev-select")
    args = p.parse_args(argv)
    data, cache = load_dataset(args.data), FeatureCache()
    loaded = Captioner("cpu").model(args.model)
    paths = data.split(args.split)
    items = [cache.load(path) for path in paths]
    references = {path: data.captions[path] for path in paths}
    rates = found_rate(data, cache)
    rows = []
    for name, guide in candidates(rates).items():
        hyps = guided_generate(loaded, items, paths, DecodeSettings(strategy="beam", beam_size=3), guide=guide)
        captions = {path: caption_text(loaded, hyps[path]) for path in paths}
        objects, scores = hallucination_block(captions, references), score_captions(captions, references, meteor=False)
        rows.append({"rule": name, "guide": guide, **{k: objects[k] for k in ("chair_s", "chair_s_ci", "object_recall",
                     "object_recall_ci")}, "BLEU-4": scores["BLEU-4"], "CIDEr": scores["CIDEr"]})
        print(f"{name}: CHAIR_s {objects['chair_s']}, recall {objects['object_recall']}, BLEU-4 {scores['BLEU-4']}",
              file=sys.stderr)
    report = {"model": args.model, "split": args.split, "photos": len(paths), "decoding": "beam 3",
              "chosen": chosen(rows), "choice": f"the lowest CHAIR_s of the rules within {BLEU_LOSS} BLEU-4 and "
              f"{RECALL_LOSS:.0%} object recall of plain", "found_on_train": rates, "rules": rows}
    with open(OUT, "w") as f:
        json.dump(report, f, indent=1)
    print(f"chosen: {report['chosen']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
