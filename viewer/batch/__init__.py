"""Dataset commands as items -> per-photo records -> one reduce; engines only decide where the map runs.

`Job` says what a command computes; `run` maps its items (locally, on Ray, or one shard of them)
into a `RecordFile`, skipping the items already recorded; the command's reducer turns the sorted
records into the report, so the report cannot depend on the engine.
"""
from .engines import ENGINES, Job, run, shard_spec
from .records import RecordFile, read_dirs

__all__ = ["ENGINES", "Job", "RecordFile", "read_dirs", "run", "shard_spec"]
