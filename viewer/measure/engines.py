"""Photos per second of `evaluate --explain occlusion` through each engine on this machine, and
Ray's overhead: its start-up, and what it adds per photo over the same work in this process."""
from __future__ import annotations

import time


def engine_bench(model: str, data: str, split: str, photos: int = 24, checkpoints: str | None = None,
                 cache: str | None = None, methods: str = "occlusion", log=None) -> dict:
    """Local with torch's default threads, local with 1 thread (a Ray actor's), Ray with 1 worker."""
    import os

    from ..batch import run
    from ..batch.engines import start_ray
    from ..commands import evaluate
    from ..commands.parser import parser_for
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

