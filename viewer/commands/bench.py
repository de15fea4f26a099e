"""`bench`: latency per stage, render time, throughput and memory of the models here."""
from __future__ import annotations

import glob
import json
import os
import time

NAME = "bench"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="measure latency per stage, render time, throughput, memory")
    p.add_argument("--models", nargs="+", help="default: every model in checkpoints/")
    p.add_argument("--images", nargs="+", help="photos or folders (default: assets/)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--startup", action="store_true", help="also time app start to first page (3 starts)")
    p.add_argument("--explain", action="store_true", help="also time per-word maps: occlusion of a whole caption, "
                                                          "Grad-CAM and relevancy per word, deletion of one word")
    p.add_argument("--ask", action="store_true", help="also time ask -> answer for every question answering model "
                                                      "here, the photo prepared")
    p.add_argument("--engines", action="store_true", help="instead: photos per second of `evaluate --explain "
                   "occlusion` on --photos photos of --data/--split, locally and on Ray (1 worker), and Ray's overhead")
    p.add_argument("--data", default=os.path.join("..", "shared", "data", "flickr8k"), help="with --engines")
    p.add_argument("--split", default="dev-select", help="with --engines")
    p.add_argument("--photos", type=int, default=24, help="with --engines")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.engines:
        from .options import log
        result = engine_bench((args.models or ["sat-soft"])[0], args.data, args.split, args.photos, args.checkpoints,
                              log=log)
        print(json.dumps(result, indent=1))
        return 0
    from ..analysis.speed import inprocess_table
    from ..measure import bench
    from ..engine.checkpoints import available, read_meta, shipped, stored_vision_spec
    from ..paths import ASSETS
    images = args.images or [ASSETS]
    paths = []
    for item in images:
        paths += sorted(glob.glob(os.path.join(item, "*.jpg"))) if os.path.isdir(item) else [item]
    found = available(args.checkpoints, task="caption")
    models = args.models or [name for name in shipped(args.checkpoints)
                             if not stored_vision_spec(read_meta(found[name])).brings_own_features]
    answerers = list(available(args.checkpoints, task="answer")) if args.ask else []
    result = bench.run(models, paths, args.device, repeats=args.repeats, beam=args.beam,
                       checkpoint_dir=args.checkpoints, explain=args.explain, answerers=answerers)
    if args.startup:
        result["startup"] = bench.startup(args.checkpoints)
    print(json.dumps(result, indent=1) if args.json else inprocess_table(result))
    return 0


def engine_bench(model: str, data: str, split: str, photos: int = 24, checkpoints: str | None = None,
                 cache: str | None = None, methods: str = "occlusion", log=None) -> dict:
    """Photos per second of `evaluate --explain occlusion` through each engine on this machine, and Ray's
    overhead: local with torch's default threads, local with 1 thread (a Ray actor's), Ray with 1 worker."""
    from ..batch import run
    from ..batch.engines import start_ray
    from . import evaluate
    from .parser import parser_for
    argv = (["--checkpoints", checkpoints] if checkpoints else []) + [
        "evaluate", "--model", model, "--data", data, "--split", split, "--explain", methods, "--imputers", "blur",
        "--explain-photos", str(photos), "--explain-sanity", "0"] + (["--cache", cache] if cache else [])
    job, _ = evaluate.job(parser_for([evaluate]).parse_args(argv))
    job.items = job.items[:photos]
    out = {"model": model, "split": split, "photos": len(job.items), "command": "evaluate --explain " + methods,
           "cpus": os.cpu_count()}

    def timed(name, engine, cpus=None):
        start = time.perf_counter()
        records = run(job, None, engine, cpus_per_worker=cpus)
        seconds = time.perf_counter() - start
        assert len(records) == len(job.items) and not any("error" in r for r in records), records[:1]
        out[name] = {"seconds": round(seconds, 1), "photos_per_s": round(len(records) / seconds, 3)}
        if log:
            log(f"{name}: {out[name]}")

    timed("local", "local")
    timed("local_1_thread", "local", 1)
    start = time.perf_counter()
    start_ray()
    out["ray_start_s"] = round(time.perf_counter() - start, 1)
    timed("ray_1_worker", "ray")
    extra = out["ray_1_worker"]["seconds"] - out["local_1_thread"]["seconds"]
    out["ray_overhead_per_photo_s"] = round(extra / len(job.items), 3)
    out["scaling"] = ("N workers on N free machines (or GPUs): close to N times the photos per second, since photos "
                      "are independent and each actor loads the model once; on one machine, at most its cores "
                      "divided by each worker's threads, and Ray needs a CPU free for its own tasks")
    return out
