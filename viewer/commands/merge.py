"""`merge DIR...`: the report of a run from the records of every shard (`--shard I/N --out DIR`),
written with the same reducer as an unsharded run, so the report cannot depend on how it was split.
It names every photo that has no record yet (a shard not run) and every photo that failed."""
from __future__ import annotations

import json
import sys

NAME = "merge"
NAMED = 10   # photos named in the text output; --json lists them all


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="write the report of a sharded run from every shard's records")
    p.add_argument("folders", nargs="+", metavar="DIR", help="the --out folders of the shards (one shared folder "
                                                             "is fine)")
    p.add_argument("--out", help="where the report goes (default: the first folder)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def named(what: str, ids: list[str]) -> str:
    more = f" and {len(ids) - NAMED} more" if len(ids) > NAMED else ""
    return f"{len(ids)} {what}: {', '.join(ids[:NAMED])}{more}"


def run(args) -> int:
    from ..batch import read_dirs
    from . import BATCH_COMMANDS
    fingerprint, ids, records = read_dirs(args.folders)
    command = BATCH_COMMANDS.get(fingerprint.get("command"))
    if command is None:
        raise ValueError(f"{args.folders[0]}: records of an unknown command {fingerprint.get('command')!r}")
    if ids is None:
        raise ValueError(f"{args.folders[0]}: records of an older format (no item list): run the command again")
    present = {r["index"] for r in records}
    missing = [photo for i, photo in enumerate(ids) if i not in present]
    failed = [{"id": r["id"], "error": r["error"]} for r in records if "error" in r]
    report = command.reduce(fingerprint, records)
    paths = command.write(report, args.out or args.folders[0], fingerprint)
    if args.json:
        print(json.dumps({"command": fingerprint["command"], "records": len(records), "missing": missing,
                          "failed": failed, "report": paths}))
    else:
        print(f"{fingerprint['command']}: {len(records)} of {len(ids)} photos recorded; wrote "
              + ", ".join(paths.values()))
        if missing:
            print("missing (no shard has run them yet): " + named("photos", missing), file=sys.stderr)
        if failed:
            print("failed: " + named("photos", [f"{f['id']} ({f['error']})" for f in failed]), file=sys.stderr)
    return 2 if missing else 0
