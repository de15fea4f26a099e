"""Where a job's map runs: `local` (this process), `ray` (Ray Data over an actor pool), or one
`--shard I/N` of either. Items are mapped in fixed chunks (a chunk is one batch for the model and
the unit a shard, a Ray task and a resumed run deal in), so a record never depends on the engine.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable

from .records import FORMAT, RecordFile, digest, file_name, locked, read_dir

RETRIES = 2   # a Ray task whose worker died runs again this many times, on a restarted actor


@dataclass
class Job:
    """A dataset command as items -> records: what every engine runs.

    `items`: JSON objects, each with `index` (its place) and `id` (the photo; `sha`, its content's
    digest, where the id is a path outside a dataset), plus what the worker needs; `settings`:
    everything else the records depend on (with the command, the items' digest and the record
    format, the run's fingerprint);
    `worker`: a picklable callable that makes the per-worker function `items -> records` (it loads
    the model, once per process or actor); `chunk`: how many items are mapped together."""

    command: str
    items: list[dict]
    settings: dict
    worker: Callable[[], Callable[[list[dict]], list[dict]]]
    chunk: int = 1

    @property
    def fingerprint(self) -> dict:
        return {"command": self.command, "chunk": self.chunk, "format": FORMAT,
                "items": {"count": len(self.items), "digest": digest([item_key(it) for it in self.items])},
                **self.settings}

    @property
    def ids(self) -> list[str]:
        return [it["id"] for it in self.items]

    def chunks(self, shard: tuple[int, int] | None = None) -> list[list[dict]]:
        every = [self.items[i:i + self.chunk] for i in range(0, len(self.items), self.chunk)]
        return every if shard is None else every[shard[0] - 1::shard[1]]


def item_key(item: dict) -> list:
    """What an item is about: its id, and its content's digest where it has one."""
    return [item["id"], item.get("sha")]


def shard_spec(text: str | None) -> tuple[int, int] | None:
    """'2/4' -> (2, 4): the second of four deterministic slices (numbered from 1)."""
    if text is None:
        return None
    i, _, n = text.partition("/")
    try:
        spec = int(i), int(n)
    except ValueError:
        spec = (0, 0)
    if not 1 <= spec[0] <= spec[1]:
        raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. --shard 1/4")
    return spec


def error_record(item: dict, err: BaseException) -> dict:
    return {"index": item["index"], "id": item["id"], "error": f"{type(err).__name__}: {err}"}


def map_chunk(fn: Callable[[list[dict]], list[dict]], items: list[dict]) -> list[dict]:
    """`fn` over a chunk; when the chunk raises, each item alone, so one bad photo costs only itself."""
    try:
        return fn(items)
    except Exception:   # noqa: BLE001 - a failing photo becomes its error record, the run goes on
        if len(items) == 1:
            return [error_record(items[0], sys.exc_info()[1])]
    out = []
    for item in items:
        try:
            out += fn([item])
        except Exception as err:   # noqa: BLE001
            out.append(error_record(item, err))
    return out


def _local(job: Job, chunks: list[list[dict]], cpus: float | None = None, **_):
    """In this process; with `cpus`, torch's threads set as a Ray actor's are (float sums in the
    model depend on the thread count in their last bits, so equal threads give equal records)."""
    import torch
    before = torch.get_num_threads()
    if cpus is not None:
        torch.set_num_threads(max(1, int(cpus)))
    try:
        fn = job.worker()
        for chunk in chunks:
            yield map_chunk(fn, chunk)
    finally:
        torch.set_num_threads(before)


class ChunkWorker:
    """A Ray Data actor: loads the model once (`worker()`), then maps one chunk per row."""

    def __init__(self, worker, threads: int):
        import torch
        torch.set_num_threads(threads)   # else every actor uses every core
        self.fn = worker()

    def __call__(self, batch: dict) -> dict:
        import numpy as np
        done = [json.dumps(map_chunk(self.fn, json.loads(c))) for c in batch["chunk"]]
        return {"records": np.array(done, dtype=object)}

    def one(self, item: dict) -> list[dict]:
        return map_chunk(self.fn, [item])


def start_ray(log=None):
    """Join the cluster named by RAY_ADDRESS (or a `ray start` on this machine), else start a local
    instance; usage statistics off. Workers import this package from where the driver does."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ValueError("--engine ray needs Ray: pip install '.[ray]' (or ray[data] as pinned in requirements.txt)")
    if not ray.is_initialized():
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        ray.init(include_dashboard=False, logging_level="WARNING", log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0"}})
        if log:
            log(f"ray: {ray.cluster_resources().get('CPU', 0):g} CPUs, {ray.cluster_resources().get('GPU', 0):g} GPUs")
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return ray


def _ray(job: Job, chunks: list[list[dict]], workers: int = 1, gpus: float = 0, cpus: float | None = None, log=None):
    """Ray Data: one actor per worker loads the model once; a dead actor is restarted and its chunk
    runs again. Should a chunk still fail (a photo that kills every worker it meets), the chunks
    not recorded yet run as single items, each its own Ray task, and what still dies becomes an
    error record."""
    ray = start_ray(log)
    cpus = 1.0 if cpus is None else cpus
    rows = [{"chunk": json.dumps(c)} for c in chunks]
    seen: set[int] = set()
    try:
        with warnings.catch_warnings():   # Ray 2.60 deprecates passing retry limits this way, and keeps honouring them
            warnings.simplefilter("ignore")
            ds = ray.data.from_items(rows, override_num_blocks=max(1, len(rows))).map_batches(
                ChunkWorker, fn_constructor_kwargs={"worker": job.worker, "threads": max(1, int(cpus))},
                batch_size=1, compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=cpus, num_gpus=gpus,
                max_restarts=-1, max_task_retries=RETRIES)   # Ray Data's default retries a dying photo forever
        for row in ds.iter_rows():
            recs = json.loads(row["records"])
            seen.update(r["index"] for r in recs)
            yield recs
    except Exception as err:   # noqa: BLE001 - the retries ran out: isolate the photo that kills workers
        left = [item for c in chunks for item in c if item["index"] not in seen]
        if log:
            log(f"ray: a chunk failed after {RETRIES} retries ({type(err).__name__}); its {len(left)} photos run "
                f"one by one on {workers} worker(s)")
        yield from _isolate(ray, job, left, workers, gpus, cpus)


def _isolate(ray, job: Job, items: list[dict], workers: int, gpus: float, cpus: float):
    """Each item alone, at most `workers` at a time (one per actor), on actors that load the model
    once; an actor that dies restarts (loading it again) and Ray runs its item again, RETRIES times,
    after which the item is an error record."""
    actor = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=-1, max_task_retries=RETRIES)(ChunkWorker)
    free = [actor.remote(job.worker, max(1, int(cpus))) for _ in range(min(workers, len(items)))]
    queue, running = list(items), {}
    while queue or running:
        while queue and free:
            worker = free.pop()
            item = queue.pop(0)
            running[worker.one.remote(item)] = (worker, item)
        (ref,), _ = ray.wait(list(running), num_returns=1)
        worker, item = running.pop(ref)
        free.append(worker)
        try:
            yield ray.get(ref)
        except Exception as died:   # noqa: BLE001 - the actor died on this photo every time
            yield [error_record(item, died)]


ENGINES = {"local": _local, "ray": _ray}


def run(job: Job, out: str | None = None, engine: str = "local", shard: tuple[int, int] | None = None,
        workers: int = 1, gpus_per_worker: float = 0, cpus_per_worker: float | None = None, log=None) -> list[dict]:
    """Map the job's items not yet in `out` (all of them, or one shard's) and return the sorted
    records of those items, written ones included."""
    if engine not in ENGINES:
        raise ValueError(f"--engine {engine!r}: choose from {', '.join(ENGINES)}")
    path = out and os.path.join(out, file_name(shard))
    with locked(path):   # one run at a time writes a records file
        store = RecordFile(path, job.fingerprint, job.ids)
        if out:   # every shard's records in the folder count as done
            for rec in read_dir(out, job.fingerprint)[2].values():
                store.done.setdefault(rec["index"], rec)
        for i, rec in list(store.done.items()):   # a record is reused only for the item it is about
            if i >= len(job.items) or rec["id"] != job.items[i]["id"]:
                del store.done[i]
        mine = job.chunks(shard)
        indices = [item["index"] for c in mine for item in c]
        todo = [c for c in mine if any(store.todo(item["index"]) for item in c)]
        retried = sum(i in store.done and store.todo(i) for i in indices)
        start = time.perf_counter()
        if log and out:
            log(f"{job.command}: {sum(not store.todo(i) for i in indices)} of {len(indices)} photos already in "
                f"{store.path}" + (f"; {retried} that failed before are tried again" if retried else ""))
        for recs in ENGINES[engine](job, todo, workers=workers, gpus=gpus_per_worker, cpus=cpus_per_worker, log=log):
            store.add(recs)
            if log:
                for r in recs:
                    if "error" in r:
                        log(f"{r['id']}: {r['error']}")
                log(f"{job.command}: {sum(not store.todo(i) for i in indices)}/{len(indices)} photos, "
                    f"{time.perf_counter() - start:.0f} s")
        return store.sorted(indices)


def failures(records: list[dict]) -> str:
    """'' or ', N failed' for a report's text: failures are said wherever results are."""
    n = sum("error" in r for r in records)
    return f", {n} failed" if n else ""
