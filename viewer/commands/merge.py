"""`merge DIR...`: the report of a run from the records of every shard (`--shard I/N --out DIR`),
written with the same reducer as an unsharded run, so the report cannot depend on how it was split."""
from __future__ import annotations

import json

NAME = "merge"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="write the report of a sharded run from every shard's records")
    p.add_argument("folders", nargs="+", metavar="DIR", help="the --out folders of the shards (one shared folder "
                                                             "is fine)")
    p.add_argument("--out", help="where the report goes (default: the first folder)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..batch import read_dirs
    from . import BATCH_COMMANDS
    fingerprint, records = read_dirs(args.folders)
    command = BATCH_COMMANDS.get(fingerprint.get("command"))
    if command is None:
        raise ValueError(f"{args.folders[0]}: records of an unknown command {fingerprint.get('command')!r}")
    expected = fingerprint.get("photos", None)
    report = command.reduce(fingerprint, records)
    paths = command.write(report, args.out or args.folders[0], fingerprint)
    missing = (expected - len(records)) if expected is not None else 0
    print(json.dumps({"command": fingerprint["command"], "records": len(records), "missing": max(missing, 0),
                      "failed": sum("error" in r for r in records), "report": paths}) if args.json else
          f"{fingerprint['command']}: {len(records)} records" + (f", {missing} photos not run yet" if missing > 0 else "")
          + "; wrote " + ", ".join(paths.values()))
    return 0
