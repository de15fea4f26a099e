"""`triage`: caption many photos and rank them worst first (score, grounding, confidence, seen),
one record per photo (analysis/triage.py `triage_records`); the report folder is the reduce."""
from __future__ import annotations

import functools
import glob
import json
import os

from . import options

NAME = "triage"
CHUNK = 16


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="rank many photos by score, grounding or confidence; HTML report + CSV")
    p.add_argument("--model", required=True)
    p.add_argument("--data", help="dataset folder or JSON (references give scores)")
    p.add_argument("--split", default="dev")
    p.add_argument("--images", help="a folder of photos instead of a dataset")
    p.add_argument("--sort", choices=["score", "grounding", "confidence", "seen"], default="score",
                   help="worst first by CIDEr, grounding, mean log-prob, or the object word least seen "
                        "(the smallest visual dependence)")
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="only the first N photos")
    p.add_argument("--features", help="precomputed features for imported models (.tsv, .hdf5 or folder of .npz)")
    p.add_argument("--questions", metavar="FILE.json", help="a question answering model (vqa-*): list its wrong answers "
                   "and its guessed ones (little dependence on the photo) to the split's questions of this file "
                   "(written by `qa-data`; split dev means dev-report; --limit N: the first N photos); the answers are "
                   "`evaluate --questions --dependence` records, on any engine")
    options.add_batch_options(p, "the report folder (default triage/MODEL-SPLIT, which the app's Triage tab lists)")
    p.set_defaults(func=run)


def open_worker(opts: dict):
    """Once per worker: the model (and the references); returns items -> records."""
    import os
    from ..analysis.language_prior import References
    from ..analysis.triage import triage_records
    from ..data.datasets import load_dataset
    from ..paths import FLICKR8K
    from ..engine.decoding import DecodeSettings
    from ..engine.pipeline import Captioner
    captioner = Captioner(opts["device"], checkpoint_dir=opts["checkpoints"], feature_files=opts["features"])
    captioner.model(opts["model_arg"])
    data = load_dataset(opts["data"]) if opts["data"] else None
    settings = DecodeSettings(beam_size=opts["beam"])

    prior_photos = References.of(data or (load_dataset(FLICKR8K) if os.path.isdir(FLICKR8K) else None))

    def records(items: list[dict]) -> list[dict]:
        refs = None if data is None else {it["id"]: data.captions[it["id"]] for it in items}
        return triage_records(captioner, opts["model_arg"], items, refs, settings, prior_photos)
    return records


def photo_items(args) -> tuple[list[dict], str | None]:
    """The photos as items (a dataset's by path, a folder's with their content's digest) and the
    dataset's digest (None for a folder)."""
    if bool(args.data) == bool(args.images):
        raise ValueError("give either --data DIR (with --split) or --images FOLDER")
    if args.data:
        from ..data.datasets import load_dataset
        data = load_dataset(args.data)
        paths = data.split(args.split)
        paths = paths[: args.limit] if args.limit else paths
        return [{"index": i, "id": p} for i, p in enumerate(paths)], data.digest()
    paths = sorted(p for ext in ("jpg", "jpeg", "png") for p in glob.glob(os.path.join(args.images, f"*.{ext}")))
    return options.photo_items(paths[: args.limit] if args.limit else paths), None


def job(args):
    from ..batch import Job
    items, data_digest = photo_items(args)
    loaded = options.captioner(args).model(args.model)
    settings = {**options.model_identity(loaded), "data": args.data and os.path.abspath(args.data),
                "data_digest": data_digest, "split": args.split if args.data else None,
                "images": args.images and os.path.abspath(args.images), "beam": args.beam,
                "features": args.features, "sort": args.sort}
    opts = {"device": args.device, "checkpoints": args.checkpoints, "features": args.features,
            "model_arg": args.model, "data": args.data, "beam": args.beam}
    return Job(NAME, items, settings, functools.partial(open_worker, opts), CHUNK)


def reduce(fingerprint: dict, records: list[dict]) -> list[dict]:
    from ..analysis.triage import rank, reduce_triage
    return rank(reduce_triage(records), fingerprint["sort"])


def write(rows: list[dict], out: str, fingerprint: dict) -> dict:
    from ..analysis.triage import write_report
    return write_report(rows, out, fingerprint["model"], fingerprint["sort"])


def answers(args) -> int:
    """triage --questions: the split's questions answered with each answer's dependence on the photo,
    as `evaluate --questions --dependence` records (any engine, resumed from --out, --shard then
    `merge`), then the wrong and the guessed answers, worst first, as a triage report."""
    import argparse
    from . import answers as qa
    from ..analysis.triage import answer_rows, write_report
    if not args.data:
        raise ValueError("--questions needs --data DIR, the dataset the questions were generated from")
    split = "dev-report" if args.split == "dev" else args.split
    args.out = args.out or os.path.join("triage", f"{os.path.basename(args.model).split('.')[0]}-{split}-answers")
    batch = qa.job(argparse.Namespace(**{**vars(args), "split": split, "dependence": True, "blind": None,
                                         "explain": None, "cache": None}))
    batch.items = batch.items[: args.limit] if args.limit else batch.items
    records = options.run_batch(batch, args)
    if records is None:
        return 0
    rows = answer_rows(options.captioner(args), args.model, records)
    asked = sum(len(r["answers"]) for r in records if "error" not in r)
    paths = write_report(rows, args.out, args.model, "answer (wrong, then guessed)", what=f"of {asked} answers")
    print(json.dumps({**paths, "questions": asked, "listed": len(rows), "wrong": sum(not r["right"] for r in rows),
                      "failed": [r["id"] for r in records if "error" in r]}))
    return 0


def run(args) -> int:
    if args.questions:
        return answers(args)
    batch = job(args)
    name = f"{os.path.basename(args.model).split('.')[0]}-" + (
        args.split if args.data else os.path.basename(os.path.normpath(args.images)))
    args.out = args.out or os.path.join("triage", name)
    records = options.run_batch(batch, args)
    if records is not None:
        failed = [r["id"] for r in records if "error" in r]
        print(json.dumps({**write(reduce(batch.fingerprint, records), args.out, batch.fingerprint), "failed": failed}))
    return 0
