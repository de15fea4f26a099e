"""`caption`: caption photos (files or folders), one trace each; with --out or an engine, the
traces are per-photo records written as they finish, and DIR/traces.jsonl their sorted reduce."""
from __future__ import annotations

import functools
import glob
import json
import os
import sys

from . import options

NAME = "caption"
CHUNK = 8
PHOTO_TYPES = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff")


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="caption photos")
    p.add_argument("images", nargs="+", help="photos, or folders of photos")
    p.add_argument("--model", default="sat-soft", help="model name or checkpoint path")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--beam", type=int, default=3)
    mode.add_argument("--greedy", action="store_true")
    mode.add_argument("--sample", action="store_true")
    mode.add_argument("--force", metavar="CAPTION", help="score this caption instead of generating one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-len", type=int, default=20)
    p.add_argument("--length-penalty", type=float, default=0.0)
    p.add_argument("--include", metavar="WORDS", help="beam search that must include these words (constrained "
                   "beam search): comma-separated, 'a|b' for either, a single word also in its plural")
    p.add_argument("--guide", choices=["detector"], help="require the words of the detector's top classes and "
                   "never name a class it does not see, nor <unk> (constrained beam search; see analysis/guide.py)")
    p.add_argument("--need", type=int, metavar="N", help="with --include/--guide: how many of the required words "
                   "must appear (default all)")
    p.add_argument("--json", action="store_true", help="one JSON trace per image (schema in README)")
    p.add_argument("--features", help="precomputed features for imported models (.tsv, .hdf5 or folder of .npz)")
    p.add_argument("--steer", metavar="STEP:ROW,COL", help="make word STEP (from 1) attend to grid cell ROW,COL "
                   "(from 0), or to region STEP:REGION (region models), and decode on from there; "
                   "--json prints that decode, its steered step marked")
    p.add_argument("--faithfulness", action="store_true",
                   help="with --json: every step gets drop_top / drop_random, the drop of its word's log-probability "
                        "(nats) when the units holding the top half of its attention, or as many random ones, are hidden")
    p.add_argument("--explain", metavar="METHODS", help="with --json: every step gets 'explain' {method: 14x14 map} "
                   "for these methods (attention, occlusion, gradcam, relevancy, superpixels, kernelshap, "
                   "occlusion-fine; comma-separated) and, per imputer, each map's pixel-space deletion AUC and gap "
                   "(blur_gap; road = cell-level ROAD) and the word's visual dependence")
    p.add_argument("--imputers", default="blur", metavar="NAMES",
                   help="with --explain: what hidden pixels become when maps are scored: blur, road (ROAD's noisy "
                        "linear imputation) or blur,road (default blur)")
    options.add_batch_options(p, "write traces.jsonl there (one JSON trace per photo, in the order given)")
    p.set_defaults(func=run)


def steer_spec(spec: str, attends_to: str) -> tuple[int, tuple[int, ...]]:
    """--steer STEP:ROW,COL (grid) or STEP:REGION (regions) -> (0-based step, (row, col) or (region,))."""
    from ..engine.images import AttendsTo
    head, _, tail = spec.partition(":")
    try:
        step, where = int(head), tuple(int(v) for v in tail.split(","))
    except ValueError:
        step, where = 0, ()
    if step < 1 or len(where) not in (1, 2):
        raise ValueError(f"--steer {spec!r}: expected STEP:ROW,COL (grid models) or STEP:REGION (region models), "
                         "STEP counting words from 1")
    if (len(where) == 1) != (attends_to == AttendsTo.REGIONS):
        raise ValueError(f"--steer {spec!r}: this model attends to "
                         + ("regions: give STEP:REGION" if attends_to == AttendsTo.REGIONS else "a grid: give STEP:ROW,COL"))
    return step - 1, where


def steer_unit(trace, where: tuple[int, ...]) -> tuple[int, str]:
    """The cell or region a --steer place names on this trace, and how to say it."""
    from ..engine.images import AttendsTo
    if trace.attends_to == AttendsTo.REGIONS:
        n = len(trace.region_labels)
        if not 0 <= where[0] < n:
            raise ValueError(f"--steer: no region {where[0]} in {trace.image} (it has {n}, numbered from 0)")
        return where[0], f"region {where[0]} ({trace.region_labels[where[0]]})"
    side = trace.grid_side
    row, col = where
    if not (0 <= row < side and 0 <= col < side):
        raise ValueError(f"--steer: cell ({row}, {col}) is outside the {side}x{side} grid (rows and columns from 0)")
    return row * side + col, f"(row {row}, col {col})"


def open_worker(opts: dict):
    """Once per worker: the model; returns items -> records (a photo that does not open: an error record)."""
    from argparse import Namespace
    from ..analysis.guide import guided_settings
    from ..analysis.faithfulness import trace_faithfulness
    from ..analysis.pixel_faithfulness import step_explanations
    from ..analysis.steer import steer, steer_map
    from ..engine.images import load_photo
    from ..engine.pipeline import Captioner

    captioner = Captioner(opts["device"], checkpoint_dir=opts["checkpoints"], feature_files=opts["features"])
    model, lm = opts["model_arg"], captioner.model(opts["model_arg"])
    settings = options.decode_settings(Namespace(**opts["decode"]))
    steering = None if opts["steer"] is None else steer_spec(opts["steer"], lm.attends_to)

    def record(item: dict) -> dict:
        photo = load_photo(item["id"])
        photo.name = item["id"]
        force = opts["decode"]["force"]
        search, note = {}, ""
        if force is not None:
            trace = captioner.force([photo], model, [force], seed=opts["decode"]["seed"])[0]
        else:
            required, avoid, note = required_words(captioner, model, photo, opts)
            search = {"constraints": required and [required], "need": opts["need"], "avoid": avoid and [avoid]}
            trace = captioner.caption([photo], model, guided_settings(settings) if avoid else settings, **search)[0][0]
            trace.guidance = note or None
        rec = {"index": item["index"], "id": item["id"], "caption": trace.caption, "guidance": note,
               "logprob": round(sum(s.logprob for s in trace.steps), 4)}
        shown = trace
        if steering is not None:
            unit, where = steer_unit(trace, steering[1])
            result = steer(captioner, photo, model, trace, steering[0], steer_map(trace, unit),
                           guided_settings(settings) if search.get("avoid") else settings, **search)
            shown = result.trace
            shown.guidance = trace.guidance
            rec["steered"] = {"step": result.step + 1, "where": where, "word": result.word,
                              "prob_before": result.prob_before, "prob_after": result.prob_after,
                              "caption": result.caption}
        obj = shown.to_json()
        if opts["faithfulness"]:
            for step, word in zip(obj["steps"], trace_faithfulness(captioner, photo, model, shown, levels=())):
                step.update(drop_top=round(word.drop_top, 4), drop_random=round(word.drop_random, 4))
        if opts["methods"]:
            for step, more in zip(obj["steps"], step_explanations(captioner, photo, model, shown.token_ids,
                                                                  tuple(opts["methods"]), tuple(opts["imputers"]))):
                step.update(more)
        rec["trace"] = obj
        return rec
    return lambda items: [record(it) for it in items]


def required_words(captioner, model: str, photo, opts: dict):
    """What one photo's caption must and must not say: the user's words and, with --guide, the
    detector's classes the model can say (None: none); the words of what it does not see
    (analysis/guide.py; None: no --guide), less the classes of the user's words (the user's word
    wins); and the line saying so (empty when they agree)."""
    from ..analysis.guide import guidance, overruled_note, user_wins, user_words
    asked = user_words(opts["include"]) if opts["include"] else []
    if not opts["guide"]:
        return asked or None, None, ""
    must, unseen = guidance(captioner.model(model).vocab, captioner.vision.detector.detect(photo.rgb))
    unseen, overruled = user_wins(unseen, asked)
    return (asked + must) or None, unseen, overruled_note(overruled)


def guide(source: str | None) -> dict | None:
    """--guide as the records' fingerprint names it: the source and the constants that choose its words."""
    from ..analysis.guide import CLASS_WORDS, MORE_WORDS, MOST, NO_REPEAT, RULE_OUT, THRESHOLD
    return None if source is None else {"source": source, "threshold": THRESHOLD, "most": MOST, "rule_out": list(RULE_OUT),
                                        "no_repeat": NO_REPEAT, "words": words_digest(CLASS_WORDS, MORE_WORDS)}


def words_digest(*tables) -> str:
    """A short digest of the word lists that decide what guidance requires and rules out: records
    made under other lists are refused, not mixed."""
    import hashlib
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()[:16]


def photo_paths(images: list[str]) -> list[str]:
    """The photos named, each folder as its photos in name order."""
    out = []
    for item in images:
        if os.path.isdir(item):
            out += sorted(p for p in glob.glob(os.path.join(item, "*"))
                          if p.lower().rsplit(".", 1)[-1] in PHOTO_TYPES)
        else:
            out.append(item)
    return out


def job(args):
    from ..batch import Job
    if (args.faithfulness or args.explain) and not args.json and not args.out:
        raise ValueError("--faithfulness and --explain add to the JSON trace: use them with --json (or --out)")
    methods = options.methods(args.explain)
    imputers = options.imputers(args.imputers)
    lm = options.captioner(args).model(args.model)   # fail early on a bad model or steering spec, before reading photos
    if args.steer is not None:
        steer_spec(args.steer, lm.attends_to)
    decode = {k: getattr(args, k) for k in ("force", "greedy", "sample", "beam", "seed", "temperature", "max_len",
                                            "length_penalty")}
    if (args.include or args.guide) and (args.sample or args.force is not None):
        raise ValueError("--include and --guide constrain beam search (or --greedy): not with --sample or --force")
    if args.need is not None and not (args.include or args.guide):
        raise ValueError("--need counts the words --include or --guide require: give one of them")
    if args.need is not None and args.need < 1:
        raise ValueError(f"--need {args.need}: at least 1 of the required words must appear (leave it out for all)")
    if args.include:
        from ..analysis.guide import user_words
        user_words(args.include)   # a bad list fails here, before any photo
    settings = {**options.model_identity(lm), "decode": decode, "include": args.include, "guide": guide(args.guide),
                "need": args.need, "steer": args.steer, "faithfulness": args.faithfulness,
                "methods": list(methods), "imputers": list(imputers), "features": args.features}
    opts = {"device": args.device, "checkpoints": args.checkpoints, "model_arg": args.model, **settings}
    return Job(NAME, options.photo_items(photo_paths(args.images)), settings, functools.partial(open_worker, opts),
               CHUNK)


def reduce(fingerprint: dict, records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["index"])


def write(records: list[dict], out: str, fingerprint: dict | None = None) -> dict:
    """traces.jsonl (one trace per photo captioned, in order) and failed.jsonl (each photo that was
    not, and why: a failure is never dropped without a word)."""
    paths = {"traces": os.path.join(out, "traces.jsonl"), "failed": os.path.join(out, "failed.jsonl")}
    with open(paths["traces"], "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r["trace"]) + "\n" for r in records if "trace" in r))
    with open(paths["failed"], "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"id": r["id"], "error": r["error"]}) + "\n" for r in records if "error" in r))
    return paths


def run(args) -> int:
    records = options.reported(job(args), args, reduce, write)
    if records is None:
        return 0
    status = 0
    for r in records:
        if "error" in r:
            print(f"error: {r['error'].split(': ', 1)[-1]}", file=sys.stderr)
            status = 2
        elif args.json:
            print(json.dumps(r["trace"]))
        else:
            score = f"  (log p = {r['logprob']:.2f})" if args.force is not None else ""
            print(f"{r['id']}: {r['caption']}{score}")
            if r.get("guidance"):
                print(f"  {r['guidance']}")
            if "steered" in r:
                s = r["steered"]
                print(f"steered word {s['step']} to {s['where']}: p({s['word']}) {s['prob_before']:.1%} -> "
                      f"{s['prob_after']:.1%}; caption: {s['caption']}")
    return status
