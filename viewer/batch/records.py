"""Records on disk: JSON lines, the run's fingerprint first, one record per item after it.

A record is a JSON object with the item's `index` (its place in the command's item list) and `id`
(the photo). A photo that failed is a record too, with `error`. Files are appended as records
finish; a half-written last line (a killed run) is cut off before the next append, so nothing is
lost or duplicated, and a resumed run skips every index already written.
"""
from __future__ import annotations

import glob
import json
import os

PREFIX = "records"


def file_name(shard: tuple[int, int] | None) -> str:
    return f"{PREFIX}.jsonl" if shard is None else f"{PREFIX}.shard-{shard[0]}-of-{shard[1]}.jsonl"


def mixed(path: str) -> ValueError:
    return ValueError(f"{path} holds records made with other settings (its first line is their fingerprint): "
                      "write elsewhere, or delete it to start again")


def _lines(path: str) -> tuple[dict | None, list[dict]]:
    """(fingerprint, records) of one file; a line that does not parse (a run stopped mid-line) is dropped."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines:
        return None, []
    try:
        head = json.loads(lines[0])["fingerprint"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{path} is not a records file of this viewer (its first line is not a fingerprint)")
    out = []
    for line in lines[1:]:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return head, out


def read_dir(folder: str, fingerprint: dict | None = None) -> tuple[dict | None, dict[int, dict]]:
    """Every record in `folder`'s record files (all shards), by index, and their common fingerprint;
    refused when a file was made with another fingerprint (or the files disagree)."""
    found: dict[int, dict] = {}
    for path in sorted(glob.glob(os.path.join(folder, f"{PREFIX}*.jsonl"))):
        head, recs = _lines(path)
        if head is None:
            continue
        if fingerprint is None:
            fingerprint = head
        elif head != fingerprint:
            raise mixed(path)
        for rec in recs:
            found.setdefault(rec["index"], rec)
    return fingerprint, found


def read_dirs(folders: list[str]) -> tuple[dict, list[dict]]:
    """The records of several folders (shards of one run), sorted by index, and their fingerprint."""
    fingerprint, found = None, {}
    for folder in folders:
        if not os.path.isdir(folder):
            raise ValueError(f"{folder}: no such folder")
        fingerprint, recs = read_dir(folder, fingerprint)
        for i, rec in recs.items():
            found.setdefault(i, rec)
    if fingerprint is None:
        raise ValueError(f"no records in {', '.join(folders)} (a run with --out DIR writes them)")
    return fingerprint, [found[i] for i in sorted(found)]


class RecordFile:
    """One file of records, appended as they finish (`path` None: in memory); refused when it was
    made with another fingerprint. `done` holds its records by index."""

    def __init__(self, path: str | None, fingerprint: dict):
        self.fingerprint, self.path, self.done = fingerprint, path, {}
        if path is None:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        head, recs = _lines(path) if os.path.exists(path) else (None, [])
        if head is None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"fingerprint": fingerprint}) + "\n")
        elif head != fingerprint:
            raise mixed(path)
        self.done = {r["index"]: r for r in recs}
        with open(path, "rb+") as f:   # cut a half-written last line, so the next record starts a line
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def add(self, records: list[dict]) -> list[dict]:
        """Write the records not written yet (one write: a chunk lands whole or is cut off whole);
        kept as read back from JSON, so a record in memory equals the one on disk."""
        new = [json.loads(json.dumps(r)) for r in records if r["index"] not in self.done]
        if self.path is not None and new:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in new))
        self.done.update((r["index"], r) for r in new)
        return new

    def sorted(self, indices=None) -> list[dict]:
        keep = self.done if indices is None else {i: r for i, r in self.done.items() if i in set(indices)}
        return [keep[i] for i in sorted(keep)]
