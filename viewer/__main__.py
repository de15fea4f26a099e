"""Command line: python -m viewer {caption,ask,models,train,average,evaluate,triage,bench,import,merge,qa-data,
world-data,world-eval} ...

Every command that takes a model accepts a name from checkpoints/ or a checkpoint path; each
command is one module of viewer/commands/. Errors a person can fix (bad photo, unknown model,
wrong checkpoint) print one line and exit 2.
"""
from __future__ import annotations

import argparse
import sys

from .commands import (ask, average, bench, caption, evaluate, import_checkpoint, merge, models, qa_data, train, triage,
                       world_data, world_eval)
from .commands.parser import parser_for

COMMANDS = (caption, ask, models, train, average, evaluate, triage, bench, import_checkpoint, merge, qa_data,
            world_data, world_eval)


def build_parser() -> argparse.ArgumentParser:
    return parser_for(COMMANDS)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .engine.checkpoints import CheckpointError
    from .engine.images import ImageError
    try:
        return args.func(args)
    except (CheckpointError, ImageError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
