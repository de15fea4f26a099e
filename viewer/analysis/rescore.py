"""Rescore committed reports after a measure changed, from what they keep: the caption reports'
object figures (CHAIR, recall, the novel-object F1) from their captions.json, no photo decoded
again (what needs the photo or the detector, grounding and why a word is unsupported, stays as
measured); and the answer reports' "guessed" verdict (language_prior.py) from their answers, forced
on the reference photos, for the models whose checkpoint is here (the others: "not measured").

    python -m viewer.analysis.rescore --data ../shared/data/flickr8k reports/eval reports/guide reports/novel reports/qa
"""
from __future__ import annotations

import argparse
import glob
import json
import os

from ..data.datasets import load_dataset
from .hallucination import hallucination_block, novel_block


def rescore(folder: str, references: dict[str, list[str]]) -> dict:
    """A report folder's hallucination block recomputed from its captions; the photo-bound parts
    (`why`) kept. Refuses a folder whose captions name a photo the dataset lacks."""
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    with open(os.path.join(folder, "captions.json"), encoding="utf-8") as f:
        captions = {c["image"]: c["caption"] for c in json.load(f)}
    missing = [p for p in captions if p not in references]
    if missing:
        raise ValueError(f"{folder}: {len(missing)} photos are not in the dataset (first: {missing[0]})")
    refs = {p: references[p] for p in captions}
    old = report.get("hallucination", {})
    block = hallucination_block(captions, refs)
    block["novel_objects"] = novel_block(captions, refs)
    if "why" in old:
        block["why"] = old["why"]
    report["hallucination"] = block
    return report


def rescore_answers(folder: str, data, captioner) -> dict:
    """An answers report's guessed verdict recomputed under today's rule, its answers as they were."""
    from ..data.questions import Question
    from ..engine.checkpoints import CheckpointError
    from .answers import dependence_block, looked_or_guessed
    from .language_prior import References
    report = _read(os.path.join(folder, "report.json"))
    rows = report["answers"]
    by_name = {os.path.basename(p): p for p in data.captions}
    items = [Question(by_name[r["photo"]], r["type"], r["question"], r["answer"], 0) for r in rows]
    said, blind = [r["said"] for r in rows], [r.get("blind") for r in rows]
    try:
        shares = looked_or_guessed(captioner, report["model"], items, said, References.of(data))
    except CheckpointError:   # a model `make qa` trains but does not ship
        shares = [None] * len(rows)
    for r, share in zip(rows, shares):
        r["said_of_others"] = share
    report["looked_or_guessed"] = dependence_block([r.get("dependence", 0.0) for r in rows], said, items,
                                                   None if None in blind else blind, shares)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", help="report folders, or folders of them (each with report.json + captions.json)")
    p.add_argument("--data", default="../shared/data/flickr8k", help="the dataset the captions were scored on")
    args = p.parse_args(argv)
    data = load_dataset(args.data)
    found = sorted({os.path.dirname(r) for top in args.folders
                    for r in glob.glob(os.path.join(top, "**", "report.json"), recursive=True)
                    if os.path.exists(os.path.join(os.path.dirname(r), "captions.json"))})
    answers = sorted(os.path.dirname(r) for top in args.folders
                     for r in glob.glob(os.path.join(top, "**", "report.json"), recursive=True)
                     if os.path.dirname(r) not in found and "looked_or_guessed" in _read(r))
    captioner = None
    for folder in answers:
        from ..engine.pipeline import Captioner
        captioner = captioner or Captioner("cpu")
        report = rescore_answers(folder, data, captioner)
        _write(folder, report)
        print(f"{folder}: guessed {report['looked_or_guessed']['guessed']}")
    for folder in found:
        report = rescore(folder, data.captions)
        _write(folder, report)
        h = report["hallucination"]
        print(f"{folder}: CHAIR_s {h['chair_s']}  CHAIR_i {h['chair_i']}  recall {h['object_recall']}")
    return 0


def _read(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write(folder: str, report: dict) -> None:
    with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    raise SystemExit(main())
