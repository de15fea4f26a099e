"""The top-level parser for the commands it is given, apart from the list of them: code that runs one
command (bench's `engine_bench`) parses its arguments without importing every command (bench imports it)."""
from __future__ import annotations

import argparse


def parser_for(commands) -> argparse.ArgumentParser:
    """`python -m viewer`'s own options, then one subcommand per module of `commands`."""
    parser = argparse.ArgumentParser(prog="python -m viewer", description="Caption photos and inspect attention.")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--checkpoints", help="folder of named models (default: checkpoints/; installed: the "
                                              "shipped models, then ./checkpoints)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands:
        command.add_parser(sub)
    return parser
