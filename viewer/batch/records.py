"""Records on disk: JSON lines, the run's header first (its fingerprint and the ids of its items),
one record per item after it.

A record is a JSON object with the item's `index` (its place in the command's item list) and `id`
(the photo). A photo that failed is a record too, with `error`; a resumed run tries it again, and
a later record of an index replaces an earlier error record of it. Files are appended as records
finish; a half-written last line (a killed run) is cut off before the next append, a complete last
record that lost only its newline is kept, so nothing is lost, counted twice or duplicated.

The fingerprint names everything a record depends on: the command, its settings, the items (their
count and digest), the weights, the data and this code's record format. A file made under another
fingerprint is refused with one line that names what changed. While a run writes a file, FILE.lock
names its process, so a second run into the same folder is refused instead of computing it all again.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os

PREFIX = "records"
FORMAT = 2   # bump when a change alters what a record of any command holds: older records are then refused


def file_name(shard: tuple[int, int] | None) -> str:
    return f"{PREFIX}.jsonl" if shard is None else f"{PREFIX}.shard-{shard[0]}-of-{shard[1]}.jsonl"


def digest(value) -> str:
    """A short, stable digest of a JSON-able value (item lists, settings)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def file_digest(*paths: str) -> str:
    """The digest of files' bytes, in the order given (a photo's content, a dataset's captions)."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def changes(old, new, prefix: str = "") -> list[str]:
    """The dotted names of the settings that differ between two fingerprints."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(set(old) | set(new), key=str)
                for c in changes(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [prefix.rstrip(".") or "fingerprint"]


def mixed(path: str, old, new) -> ValueError:
    changed = changes(old, new)
    return ValueError(f"{path} holds records made with other settings ({', '.join(changed[:6])}"
                      f"{', ...' if len(changed) > 6 else ''} changed): write elsewhere, or delete it to start again")


def check_record(rec, path: str, line: int) -> dict:
    if not (isinstance(rec, dict) and isinstance(rec.get("index"), int) and not isinstance(rec["index"], bool)
            and rec["index"] >= 0 and isinstance(rec.get("id"), str)):
        raise ValueError(f"{path}, line {line}: not a record of this viewer (a JSON object with an index and an id)")
    return rec


def newer(found: dict[int, dict], rec: dict) -> None:
    """The later record of an index wins (a retried photo's record replaces its error record),
    except an error record, which never replaces a result."""
    old = found.get(rec["index"])
    if old is None or "error" not in rec or "error" in old:
        found[rec["index"]] = rec


def _lines(path: str) -> tuple[dict | None, list[str] | None, list[dict], bool]:
    """(fingerprint, item ids, records, whether a half-written last line was dropped) of one file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a records file of this viewer (not UTF-8 text)")
    lines = text.splitlines()
    if not lines:
        return None, None, [], False
    try:
        head = json.loads(lines[0])
        fingerprint, ids = head["fingerprint"], head.get("items")
        if not isinstance(fingerprint, dict) or not (ids is None or isinstance(ids, list)):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{path} is not a records file of this viewer (its first line is not a fingerprint)")
    out, cut = [], False
    for n, line in enumerate(lines[1:], 2):
        try:
            out.append(check_record(json.loads(line), path, n))
        except json.JSONDecodeError:
            if n == len(lines) and not text.endswith("\n"):   # a run stopped mid-line
                cut = True
                continue
            raise ValueError(f"{path}, line {n}: not JSON (a damaged records file: delete it to start again)")
    return fingerprint, ids, out, cut


def read_dir(folder: str, fingerprint: dict | None = None, pattern: str = f"{PREFIX}*.jsonl"
             ) -> tuple[dict | None, list[str] | None, dict[int, dict]]:
    """Every record in `folder`'s record files (all shards; or the files `pattern` names), by index,
    their common fingerprint and item ids; refused when a file was made with another fingerprint
    (or the files disagree)."""
    found: dict[int, dict] = {}
    ids = None
    for path in sorted(glob.glob(os.path.join(folder, pattern))):
        head, items, recs, _ = _lines(path)
        if head is None:
            continue
        if fingerprint is None:
            fingerprint = head
        elif head != fingerprint:
            raise mixed(path, head, fingerprint)
        ids = ids or items
        for rec in recs:
            newer(found, rec)
    return fingerprint, ids, found


def read_dirs(folders: list[str]) -> tuple[dict, list[str] | None, list[dict]]:
    """The records of several folders (shards of one run), sorted by index, their fingerprint and
    the run's item ids (None for files of an older format)."""
    fingerprint, ids, found = None, None, {}
    for folder in folders:
        if not os.path.isdir(folder):
            raise ValueError(f"{folder}: no such folder")
        fingerprint, items, recs = read_dir(folder, fingerprint)
        ids = ids or items
        for rec in recs.values():
            newer(found, rec)
    if fingerprint is None:
        raise ValueError(f"no records in {', '.join(folders)} (a run with --out DIR writes them)")
    return fingerprint, ids, [found[i] for i in sorted(found)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)   # signal 0: only asks whether it exists
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        pass
    return True


def _owner(lock: str) -> int | None:
    """The process id a lock file names (None: gone, or not a lock this viewer wrote)."""
    try:
        with open(lock, encoding="utf-8") as f:
            pid = int(f.read())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None   # 0 and below name process groups, never one run


@contextlib.contextmanager
def locked(path: str | None):
    """Hold `path` + ".lock" (naming this process) while a run writes `path`: a second run into the
    same folder would compute every record again beside the first, so it is refused, naming the
    process; a lock whose process is gone (a killed run) is taken over. `path` None: nothing to lock."""
    if path is None:
        yield
        return
    lock = path + ".lock"
    os.makedirs(os.path.dirname(os.path.abspath(lock)), exist_ok=True)
    mine = f"{lock}.{os.getpid()}"
    with open(mine, "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    try:
        while True:
            try:
                os.link(mine, lock)   # atomic, and the lock names its process from its first moment
                break
            except FileExistsError:
                owner = _owner(lock)
                if owner is not None and _alive(owner):
                    raise ValueError(f"another run (process {owner}) is writing {path}: wait for it to end, "
                                     "or write elsewhere") from None
                with contextlib.suppress(FileNotFoundError):
                    os.remove(lock)   # stale: its process is gone
    finally:
        os.remove(mine)
    try:
        yield
    finally:
        os.remove(lock)


class RecordFile:
    """One file of records, appended as they finish (`path` None: in memory); refused when it was
    made with another fingerprint. `done` holds its records by index (an error record too: `todo`
    tells what a run still has to map)."""

    def __init__(self, path: str | None, fingerprint: dict, ids: list[str] | None = None):
        self.fingerprint, self.path, self.done = fingerprint, path, {}
        if path is None:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        head, _, recs, cut = _lines(path) if os.path.exists(path) else (None, None, [], False)
        if head is None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"fingerprint": fingerprint, "items": ids}) + "\n")
        elif head != fingerprint:
            raise mixed(path, head, fingerprint)
        for rec in recs:
            newer(self.done, rec)
        with open(path, "rb+") as f:   # the next record must start a line
            data = f.read()
            if data and not data.endswith(b"\n"):
                if cut:   # a half-written record: cut off, never counted
                    f.truncate(data.rfind(b"\n") + 1)
                else:     # a whole record that lost its newline: kept
                    f.seek(0, os.SEEK_END)
                    f.write(b"\n")

    def todo(self, index: int) -> bool:
        """Whether the item at `index` still has to be mapped: no record, or an error record."""
        return index not in self.done or "error" in self.done[index]

    def add(self, records: list[dict]) -> list[dict]:
        """Write the records of items still to do (one write: a chunk lands whole or is cut off
        whole); kept as read back from JSON, so a record in memory equals the one on disk."""
        new = [json.loads(json.dumps(r)) for r in records if self.todo(r["index"])]
        if self.path is not None and new:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in new))
        for r in new:
            newer(self.done, r)
        return new

    def sorted(self, indices=None) -> list[dict]:
        keep = self.done if indices is None else {i: r for i, r in self.done.items() if i in set(indices)}
        return [keep[i] for i in sorted(keep)]
