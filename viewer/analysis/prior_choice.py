"""Choose the language-prior rule's K (reference photos) and SHARE (language_prior.py) on
dev-select, and write what chose them: reports/guessed/choice.json.

Answers: `vqa-regions` on 60 seeded dev-select questions, beside the blind (question-only)
model's answer to each; for each K and threshold, how many answers are flagged "would have said it
of most photos", how many of those equal the blind answer, and their accuracy beside the rest's (a
rule that finds guesses flags wrong, blind-like answers). Caption words: `sat-soft` and `updown`
greedy on 10 seeded dev-select photos, each word's share at each K. The reference photos are kept
out of both samples.

    python -m viewer.analysis.prior_choice --data ../shared/data/flickr8k
"""
from __future__ import annotations

import argparse
import json
import os
import random

import torch

from ..data import questions as Q
from ..data.datasets import load_dataset
from ..engine.decoding import DecodeSettings
from ..engine.images import load_photo
from ..engine.pipeline import Captioner
from .answers import looked_or_guessed
from .language_prior import References, language_prior, reference_paths

KS, THRESHOLDS = (8, 16, 32), (0.5, 0.7)
OUT = "reports/guessed/choice.json"


def answers(captioner, data, refs: dict, excluded: set, n: int = 60) -> list[dict]:
    """n seeded dev-select questions: the answer, vqa-regions' and the blind model's, and its share per K."""
    qs = [q for q in Q.generate(data, splits=("dev-select",))["dev-select"] if q.photo not in excluded]
    items = sorted(random.Random(1).sample(qs, n), key=lambda q: q.photo)
    rows = [{"photo": os.path.basename(q.photo), "question": q.question, "answer": q.answer} for q in items]
    for name, key in (("vqa-regions", "said"), ("vqa-blind", "blind")):
        for row, q in zip(rows, items):
            row[key] = captioner.ask([load_photo(q.photo)], name, [q.question])[0].words[0]
    for k in KS:
        for row, share in zip(rows, looked_or_guessed(captioner, "vqa-regions", items, [r["said"] for r in rows], refs[k])):
            row[f"share{k}"] = share
    return rows


def words(captioner, data, refs: dict, excluded: set, n: int = 10) -> list[dict]:
    photos = random.Random(2).sample(sorted(set(data.split("dev-select")) - excluded), n)
    out = []
    for model in ("sat-soft", "updown"):
        lm = captioner.model(model)
        for path in photos:
            trace = captioner.caption([load_photo(path)], model, DecodeSettings(strategy="greedy"))[0][0]
            row = {"model": model, "photo": os.path.basename(path), "words": trace.step_words()}
            for k in KS:
                found = language_prior(lm, refs[k].inputs(captioner, lm), torch.tensor(trace.token_ids)[None])
                row[f"share{k}"] = found.share[0].round(4).tolist()
            out.append(row)
    return out


def summary(rows: list[dict]) -> list[dict]:
    """Per (K, threshold): answers flagged, of them equal to the blind answer, and the accuracy of
    the flagged and the unflagged answers."""
    out = []
    for k in KS:
        for th in THRESHOLDS:
            flagged = [r for r in rows if r[f"share{k}"] >= th]
            rest = [r for r in rows if r[f"share{k}"] < th]
            acc = lambda rs: round(sum(r["said"] == r["answer"] for r in rs) / len(rs), 3) if rs else None  # noqa: E731
            out.append({"k": k, "threshold": th, "flagged": len(flagged), "of": len(rows),
                        "flagged_equal_to_blind": sum(r["said"] == r["blind"] for r in flagged),
                        "equal_to_blind": sum(r["said"] == r["blind"] for r in rows),
                        "accuracy_flagged": acc(flagged), "accuracy_rest": acc(rest)})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="../shared/data/flickr8k")
    p.add_argument("--out", default=OUT)
    args = p.parse_args(argv)
    data, captioner = load_dataset(args.data), Captioner("cpu")
    refs = {k: References(reference_paths(data, k)) for k in KS}
    excluded = {p for r in refs.values() for p in r.paths}
    rows = answers(captioner, data, refs, excluded)
    report = {"about": __doc__.split("\n\n")[1], "summary": summary(rows), "answers": rows,
              "words": words(captioner, data, refs, excluded)}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    for s in report["summary"]:
        print(s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
