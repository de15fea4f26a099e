"""The command line, one module per command: each has `NAME`, `add_parser(sub)` beside its `run(args)`;
viewer/__main__.py lists them (not here: `merge` imports this package for BATCH_COMMANDS).
The dataset commands (evaluate, its --boxes, triage, caption) also have `job`, `reduce` and `write`:
items -> records (viewer/batch/) -> one report, which `merge` reruns over shards."""
from __future__ import annotations

from . import answers, boxes, caption, evaluate, triage

BATCH_COMMANDS = {m.NAME: m for m in (evaluate, boxes, answers, triage, caption)}   # by the `command` their records name
