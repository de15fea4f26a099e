"""Rescore the committed caption reports' object figures (CHAIR, recall, the novel-object F1) from
the captions they keep (captions.json), after the measure changed: no photo is decoded again.
What needs the photo or the detector (grounding, why a word is unsupported) stays as measured.

    python -m viewer.analysis.rescore --data ../shared/data/flickr8k reports/eval reports/guide reports/novel
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", help="report folders, or folders of them (each with report.json + captions.json)")
    p.add_argument("--data", default="../shared/data/flickr8k", help="the dataset the captions were scored on")
    args = p.parse_args(argv)
    data = load_dataset(args.data)
    found = sorted({os.path.dirname(r) for top in args.folders
                    for r in glob.glob(os.path.join(top, "**", "report.json"), recursive=True)
                    if os.path.exists(os.path.join(os.path.dirname(r), "captions.json"))})
    for folder in found:
        report = rescore(folder, data.captions)
        with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        h = report["hallucination"]
        print(f"{folder}: CHAIR_s {h['chair_s']}  CHAIR_i {h['chair_i']}  recall {h['object_recall']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
