"""`qa-data`: questions generated from Flickr8k's captions (data/questions.py), written deterministically."""
from __future__ import annotations

from collections import Counter

NAME = "qa-data"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="generate questions from captions (object, number, colour, location)")
    p.add_argument("--data", required=True, help="the caption data folder (Flickr8k layout)")
    p.add_argument("--out", required=True, help="the questions file to write (JSON)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..data import questions
    from ..data.datasets import load_dataset
    sets = questions.generate(load_dataset(args.data))
    questions.write(args.out, sets, args.data)
    for name, items in sets.items():
        kinds = Counter(q.type for q in items)
        print(f"{name}: {len(items)} questions generated from captions ("
              + ", ".join(f"{kinds[t]} {t}" for t in questions.TYPES) + ")")
    return 0
