"""The command line, one module per command: each has `NAME`, `add_parser(sub)` beside its `run(args)`.
The dataset commands (evaluate, its --boxes, triage, caption) also have `job`, `reduce` and `write`:
items -> records (viewer/batch/) -> one report, which `merge` reruns over shards."""
from __future__ import annotations

import argparse

from . import average, bench, boxes, caption, evaluate, import_checkpoint, merge, models, train, triage

COMMANDS = (caption, models, train, average, evaluate, triage, bench, import_checkpoint, merge)
BATCH_COMMANDS = {m.NAME: m for m in (evaluate, boxes, triage, caption)}   # by the `command` their records name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m viewer", description="Caption photos and inspect attention.")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--checkpoints", help="folder of named models (default: checkpoints/; installed: the "
                                              "shipped models, then ./checkpoints)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser
