"""`models`: the models in checkpoints/ with their dev scores beside their baselines."""
from __future__ import annotations

import json
import os

NAME = "models"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="list available models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


MODEL_COLUMNS = [   # (heading, where in the dev metrics); grounding and faithfulness on the forced references
    ("BLEU-4", ("BLEU-4",)), ("CIDEr", ("CIDEr",)),
    ("pointing", ("grounding", "references_forced", "pointing")),
    ("centre", ("grounding", "references_forced", "pointing_centre_baseline")),
    ("top det.", ("grounding", "references_forced", "pointing_top_detection_baseline")),
    ("off-centre", ("grounding", "references_forced", "pointing_off_centre")),
    ("top det.", ("grounding", "references_forced", "pointing_off_centre_top_detection_baseline")),
    ("mass", ("grounding", "references_forced", "mass_in_box")),
    ("uniform", ("grounding", "references_forced", "mass_uniform_baseline")),
    ("drop top", ("grounding", "faithfulness", "drop_top")),
    ("random", ("grounding", "faithfulness", "drop_random")),
]


SPLIT = "dev-report"   # the one split every row's figures are on


def scores(name: str, path: str, meta: dict) -> dict | None:
    """A captioner's figures on SPLIT: its metadata's when it was scored there, else a shipped model's
    committed evaluation (reports/eval/NAME, `make naming`); None when neither, never another split's."""
    from ..analysis.tables import EVALUATIONS
    from ..paths import CHECKPOINT_DIR
    if (meta.get("dev_settings") or {}).get("split") == SPLIT:
        return meta.get("dev_metrics", {})
    report = os.path.join(EVALUATIONS, name, "report.json")
    if os.path.dirname(path) != CHECKPOINT_DIR or not os.path.isfile(report):
        return None
    with open(report, encoding="utf-8") as f:
        found = json.load(f)
    return found if found.get("split") == SPLIT else None


def _dig(d: dict, keys: tuple):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def run(args) -> int:
    from ..engine import checkpoints
    found = checkpoints.available(args.checkpoints)
    if not found:
        print(f"no checkpoints in {args.checkpoints or ', '.join(checkpoints.MODEL_DIRS)}")
        return 0
    rows, answerers, unscored = [], [], []
    for name in checkpoints.shipped(args.checkpoints, task=None):   # the listing order
        path = found[name]
        try:
            meta = checkpoints.read_meta(path)
        except checkpoints.CheckpointError as err:
            print(f"{name}: unusable: {err}")
            continue
        dev = meta.get("dev_metrics", {})
        size = len(meta["vocab"]) if "vocab" in meta else meta.get("vocab_size")   # hf: folders: config.json's
        if args.json:
            where = os.path.relpath(path.removeprefix(checkpoints.HF_PREFIX))
            print(json.dumps({"name": name, "type": meta["model_type"], "task": meta.get("task", "caption"), "path": where, "vocabulary": size, "dev": dev, "dev_settings": meta.get("dev_settings"),
                              "trained": meta.get("training", {}).get("epochs"), "date": meta.get("date")}))
            continue
        if meta.get("task") == "answer":
            acc = dev.get("accuracy", {})
            answerers.append(f"{name} ({meta['model_type']}): " + (", ".join(f"{k} {100 * v:.1f}%" for k, v in acc.items())
                                                                    or "not scored here"))
            continue
        figures = scores(name, path, meta)
        if figures is None:
            unscored.append(name)
        cells = [_dig(figures or {}, keys) for _, keys in MODEL_COLUMNS]
        rows.append([name, meta["model_type"], str(size)] + ["-" if c is None else f"{c:g}" for c in cells])
    if args.json or not (rows or answerers):
        return 0
    if answerers:
        print("Question answering, accuracy on the questions generated from dev-report's captions:\n  "
              + "\n  ".join(answerers) + "\n")
    if not rows:
        return 0
    head = ["name", "type", "vocab"] + [h for h, _ in MODEL_COLUMNS]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print(f"Captioning, every figure on {SPLIT}" + (f" ({', '.join(unscored)}: not scored on it)" if unscored else "")
          + ":")
    print("  ".join(h.ljust(w) if i < 3 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for r in rows:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print("Grounding on the references forced through each model, the detector's boxes of the named class as proxies;\n"
          "beside each figure its baselines on the same words: 'centre' always points at the photo's centre, 'top det.'\n"
          "at the highest-scoring detection whatever its label, 'uniform' spreads attention evenly over the model's\n"
          "own cells or regions. 'off-centre': pointing on the words whose boxes miss the centre. 'drop top' / 'random':\n"
          "how much a named word's log-probability falls (nats) when the units holding half its attention, or as many\n"
          "random ones, are hidden. `--json` has every figure with its 95% interval.")
    return 0
