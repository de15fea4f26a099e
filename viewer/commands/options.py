"""What several commands share: decoding flags, method and imputer lists, and the batch options
(`--out`, `--engine`, `--shard`) every dataset command takes."""
from __future__ import annotations

import argparse
import os
import sys


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)   # stdout stays for results (--json)


def device(args):
    from ..engine.device import pick_device
    return pick_device(args.device)


def captioner(args):
    from ..engine.pipeline import Captioner
    return Captioner(args.device, checkpoint_dir=args.checkpoints, feature_files=getattr(args, "features", None))


def decode_settings(args):
    from ..engine.decoding import DecodeSettings
    if getattr(args, "force", None) is not None:
        return DecodeSettings(strategy="forced", seed=args.seed)
    if getattr(args, "greedy", False):
        return DecodeSettings(strategy="greedy", max_len=args.max_len, seed=args.seed)
    if getattr(args, "sample", False):
        return DecodeSettings(strategy="sample", temperature=args.temperature, seed=args.seed, max_len=args.max_len)
    return DecodeSettings(strategy="beam", beam_size=args.beam, max_len=args.max_len,
                          length_penalty=getattr(args, "length_penalty", 0.0), seed=getattr(args, "seed", 0))


def imputers(text: str) -> tuple[str, ...]:
    from ..analysis.explain import IMPUTERS
    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
    unknown = [n for n in names if n not in IMPUTERS]
    if unknown or not names:
        raise ValueError(f"--imputers: choose from {', '.join(IMPUTERS)} (comma-separated)")
    return names


def methods(text: str | None) -> tuple[str, ...]:
    """--explain occlusion,gradcam -> ("occlusion", "gradcam"), refusing unknown names."""
    from ..analysis.explain import METHODS
    names = tuple(m.strip() for m in (text or "").split(",") if m.strip())
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise ValueError(f"--explain: unknown method {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    return names


def model_identity(loaded) -> dict:
    """What a record's model is: its name and the digest of its weights (a file's bytes; a folder's
    files, as an `hf:` folder or an imported model's own encoder keeps them)."""
    from ..batch.records import file_digest
    path = loaded.path
    if os.path.isfile(path):
        return {"model": loaded.name, "checkpoint": file_digest(path)}
    files = sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names) if os.path.isdir(path) else []
    return {"model": loaded.name, "checkpoint": file_digest(*files) if files else None,
            "checkpoint_files": [os.path.relpath(f, path) for f in files]}


def photo_items(paths: list[str]) -> list[dict]:
    """A command's items for photo files named by the user: each with its content's digest, so a
    record is never reused for another photo at the same path (a photo that cannot be read: no digest,
    its record will say why)."""
    from ..batch.records import file_digest
    items = []
    for i, path in enumerate(paths):
        try:
            sha = file_digest(path)
        except OSError:
            sha = None
        items.append({"index": i, "id": path, "sha": sha})
    return items


def add_batch_options(p: argparse.ArgumentParser, out_help: str) -> None:
    """--out, --engine, --workers, --gpus-per-worker, --cpus-per-worker, --shard (viewer/batch/)."""
    p.add_argument("--out", metavar="DIR", help=out_help + "; the per-photo records go there as they finish "
                   "(records*.jsonl), and running the same command again computes only the photos missing")
    p.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="local: this process (default); ray: Ray Data over --workers actors (a local Ray, or the "
                        "cluster named by RAY_ADDRESS)")
    p.add_argument("--workers", type=int, default=1, help="--engine ray: actors, each loading the model once")
    p.add_argument("--gpus-per-worker", type=float, default=0, metavar="G")
    p.add_argument("--cpus-per-worker", type=float, default=None, metavar="C",
                   help="CPUs (and torch threads) per actor (default 1: on a 2-core machine Ray needs one free); "
                        "with --engine local, torch's threads (the last digits of a report's figures depend on them)")
    p.add_argument("--chunk", type=int, metavar="N", help="photos mapped together: one batch for the model, and the "
                   "unit that shards, retries and resumes deal in (default per command; part of the fingerprint)")
    p.add_argument("--shard", metavar="I/N", help="run only the I-th of N deterministic slices of the photos "
                   "(records only; `python -m viewer merge DIR...` writes the report from every shard's records)")


def run_batch(job, args) -> list[dict] | None:
    """The job's records through the engine the options chose; None for a shard, which reports nothing."""
    from ..batch import run, shard_spec
    shard = shard_spec(args.shard)
    if shard is not None and not args.out:
        raise ValueError("--shard writes records for `merge`: give it --out DIR")
    if args.workers < 1:
        raise ValueError("--workers: at least 1")
    if args.chunk is not None:
        if args.chunk < 1:
            raise ValueError("--chunk: at least 1")
        job.chunk = args.chunk
    progress = log if args.out or args.engine != "local" else None   # a plain local run speaks only of its results
    records = run(job, args.out, args.engine, shard, args.workers, args.gpus_per_worker, args.cpus_per_worker,
                  progress)
    if shard is None:
        return records
    errors = sum("error" in r for r in records)
    log(f"shard {args.shard}: {len(records)} records in {args.out}" + (f" ({errors} failed)" if errors else "")
        + "; write the report with `python -m viewer merge DIR...` over every shard's folder")
    return None


def reported(job, args, reduce, write):
    """The report (`reduce`) of the job's records through the chosen engine, written to --out with
    `write` when given; None for a shard, which reports nothing."""
    records = run_batch(job, args)
    if records is None:
        return None
    result = reduce(job.fingerprint, records)
    if args.out:
        write(result, args.out)
    return result


def write_report(result: dict, out: str, text) -> dict:
    """report.json and report.txt (`text(result)`) in `out`; returns their paths."""
    import json
    paths = {"json": os.path.join(out, "report.json"), "text": os.path.join(out, "report.txt")}
    os.makedirs(out, exist_ok=True)
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    with open(paths["text"], "w", encoding="utf-8") as f:
        f.write(text(result) + "\n")
    return paths


def print_reported(job, args, reduce, write, text) -> int:
    """`reported`, then the report printed: as JSON with --json, else as `text`."""
    import json
    result = reported(job, args, reduce, write)
    if result is not None:
        print(json.dumps(result) if args.json else text(result))
    return 0
