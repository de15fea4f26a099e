"""`evaluate --boxes FILE.json`: grounding of each method's maps against your own boxed photos,
one record per boxed photo (analysis/user_boxes.py `boxed_record`), reduced by `reduce`."""
from __future__ import annotations

import functools
import hashlib
import os

from . import options

NAME = "boxes"


def open_worker(opts: dict):
    """Once per worker: the model and the box file; returns items -> records."""
    from ..analysis.user_boxes import boxed_record, load_box_file
    from ..engine.pipeline import Captioner
    captioner = Captioner(opts["device"], checkpoint_dir=opts["checkpoints"], feature_files=opts["features"])
    captioner.model(opts["model_arg"])
    photos = load_box_file(opts["boxes"])
    methods = tuple(opts["methods"])
    return lambda items: [boxed_record(captioner, opts["model_arg"], methods, photos[it["index"]], it["index"])
                          for it in items]


def job(args):
    from ..analysis.user_boxes import check_entries, check_methods, load_box_file
    from ..batch import Job
    photos = load_box_file(args.boxes)   # a bad file fails here, before any model loads
    captioner = options.captioner(args)
    loaded = captioner.model(args.model)
    check_entries(captioner, args.model, photos)
    methods = check_methods(captioner, args.model, ("attention", *options.methods(args.explain)))
    with open(args.boxes, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    settings = {**options.model_identity(loaded), "boxes_file": os.path.abspath(args.boxes), "boxes_sha": digest,
                "methods": list(methods)}
    opts = {"device": args.device, "checkpoints": args.checkpoints, "features": args.features,
            "model_arg": args.model, "boxes": os.path.abspath(args.boxes), "methods": list(methods)}
    items = [{**it, "id": bp.key} for it, bp in zip(options.photo_items([bp.path for bp in photos]), photos)]
    return Job(NAME, items, settings, functools.partial(open_worker, opts), 1)


def reduce(fingerprint: dict, records: list[dict]) -> dict:
    from ..analysis.user_boxes import reduce_boxes
    return reduce_boxes(records, fingerprint["model"], fingerprint["boxes_file"], tuple(fingerprint["methods"]))


def text(result: dict) -> str:
    lines = [f"{result['model']}: {result['boxed_words']} boxed words on {result['photos']} photos "
             f"({result['boxes_file']})"]
    for method, g in result["grounding"].items():
        lines.append(f"  {method:10s} pointing {g['pointing']} {g['pointing_ci']} (centre "
                     f"{g['pointing_centre_baseline']}), off-centre {g['pointing_off_centre']} "
                     f"({g['off_centre_words']} words), mass in box {g['mass_in_box']} "
                     f"(uniform {g['mass_uniform_baseline']})")
    lines += [f"  failed: {e['id']}: {e['error']}" for e in result["failed_photos"]]
    return "\n".join(lines)


def write(result: dict, out: str, fingerprint: dict | None = None) -> dict:
    return options.write_report(result, out, text)


def run(args) -> int:
    return options.print_reported(job(args), args, reduce, write, text)
