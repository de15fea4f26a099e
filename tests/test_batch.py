"""Dataset commands as records and one reduce (viewer/batch/): the local run, Ray Data and merged
shards give the same report; interrupted runs resume with nothing lost or repeated; faults in a
worker are retried; a photo that always fails is an error record. Ray starts once per session."""
import csv
import functools
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from viewer.__main__ import main as cli
from viewer.batch import Job, RecordFile, read_dirs, run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TIMINGS = ("images_per_s", "seconds", "seconds_per_caption")


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([ROOT, HERE]), "RAY_USAGE_STATS_ENABLED": "0"}})
    yield ray
    ray.shutdown()


def untimed(value):
    """A report without its timings (they differ from run to run, whatever the engine)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def _run(capsys, *argv) -> str:
    code = cli(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def _reports(folder: str, command: str):
    """What a command's report folder holds, as comparable values."""
    if command == "evaluate":
        return (untimed(json.load(open(os.path.join(folder, "report.json")))),
                json.load(open(os.path.join(folder, "captions.json"))))
    if command == "boxes":
        return untimed(json.load(open(os.path.join(folder, "report.json"))))
    if command == "triage":
        with open(os.path.join(folder, "results.csv")) as f:
            return (list(csv.DictReader(f)), open(os.path.join(folder, "report.html")).read(),
                    open(os.path.join(folder, "traces.jsonl")).read())
    return open(os.path.join(folder, "traces.jsonl")).read()


@pytest.fixture(scope="module")
def coco_data(tiny_data, tmp_path_factory) -> str:
    """The six photos with a small captions_val2014.json (COCO's layout: images with ids, annotations by
    image id): the split "dev". `evaluate` reads it, `triage` the Flickr8k layout."""
    from conftest import CAPTIONS
    folder = tmp_path_factory.mktemp("coco")
    images, annotations = [], []
    for n, (name, caps) in enumerate(CAPTIONS.items()):
        shutil.copy(os.path.join(tiny_data, "images", name), folder / name)
        images.append({"id": 100 + n, "file_name": name, "width": 0, "height": 0})
        annotations += [{"id": 1000 + 10 * n + j, "image_id": 100 + n, "caption": c} for j, c in enumerate(caps)]
    (folder / "captions_val2014.json").write_text(json.dumps({"images": images, "annotations": annotations}))
    return str(folder)


def _commands(tiny_data, coco_data, cache_dir):
    boxes = os.path.join(HERE, "data", "user_boxes.json")
    images = os.path.join(tiny_data, "images")
    return {
        "evaluate": ["evaluate", "--model", "sat-soft", "--data", coco_data, "--split", "dev", "--cache", cache_dir,
                     "--beam", "2", "--faithfulness", "--explain", "occlusion", "--imputers", "blur",
                     "--explain-photos", "1", "--explain-sanity", "0", "--chunk", "2"],
        "boxes": ["evaluate", "--model", "updown", "--boxes", boxes],
        "triage": ["triage", "--model", "sat-soft", "--data", tiny_data, "--split", "train", "--chunk", "2"],
        "caption": ["caption", images, "--model", "transformer", "--chunk", "2"],
    }


@pytest.mark.parametrize("command", ["evaluate", "boxes", "triage", "caption"])
def test_local_ray_and_merged_shards_give_the_same_report(command, ray_session, tiny_checkpoints, tiny_data, coco_data,
                                                          cache_dir, tmp_path, capsys):
    """Every dataset command, each engine, the same report; evaluate reads a COCO captions file."""
    argv = ["--checkpoints", tiny_checkpoints] + _commands(tiny_data, coco_data, cache_dir)[command]
    local, on_ray, shards = (str(tmp_path / n) for n in ("local", "ray", "shards"))
    one_thread = ["--cpus-per-worker", "1"]   # as the Ray actor: float sums differ in their last bits across thread counts
    _run(capsys, *argv, "--out", local, *one_thread)
    _run(capsys, *argv, "--out", on_ray, "--engine", "ray", "--workers", "1")
    for i in (1, 2):
        assert _run(capsys, *argv, "--out", shards, "--shard", f"{i}/2", *one_thread) == ""   # records only
    assert sorted(os.listdir(shards)) == ["records.shard-1-of-2.jsonl", "records.shard-2-of-2.jsonl"]
    _run(capsys, "merge", shards)
    expected = _reports(local, command)
    assert _reports(on_ray, command) == expected
    assert _reports(shards, command) == expected
    fingerprint, ids, records = read_dirs([shards])
    assert [r["index"] for r in records] == list(range(len(records))) and fingerprint["command"] == command
    assert [r["id"] for r in records] == ids
    halves = [len(RecordFile(os.path.join(shards, f"records.shard-{i}-of-2.jsonl"), fingerprint).done) for i in (1, 2)]
    assert all(halves), "each shard ran some photos"
    if command == "evaluate":
        report = expected[0]
        assert report["images"] == 6 and report["explain"]["photos"] == 1 and report["grounding"]["faithfulness"]
        assert report["failed_photos"] == []


def test_a_killed_run_resumes_with_nothing_lost_or_computed_twice(tiny_checkpoints, tiny_data, coco_data, cache_dir,
                                                                  tmp_path, capsys):
    argv = ["--checkpoints", tiny_checkpoints] + _commands(tiny_data, coco_data, cache_dir)["triage"]
    whole, cut = str(tmp_path / "whole"), str(tmp_path / "cut")
    _run(capsys, *argv, "--out", whole)
    lines = open(os.path.join(whole, "records.jsonl")).read().splitlines(keepends=True)
    assert len(lines) == 7   # the fingerprint, then one record per photo
    os.makedirs(cut)
    # the run was killed while writing its third record: two whole records, half a line
    with open(os.path.join(cut, "records.jsonl"), "w") as f:
        f.write("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    _run(capsys, *argv, "--out", cut)
    again = open(os.path.join(cut, "records.jsonl")).read().splitlines()
    assert [json.loads(line)["index"] for line in again[1:]] == [0, 1, 2, 3, 4, 5]   # each photo once
    assert _reports(cut, "triage") == _reports(whole, "triage")


def test_resuming_computes_only_the_missing_photos(tmp_path):
    """A job whose worker logs every item it computes: killed (os._exit) at item 3, run again."""
    out, calls = str(tmp_path / "out"), tmp_path / "calls.txt"
    script = (f"import sys; sys.path[:0] = [{ROOT!r}, {HERE!r}]\n"
              "import test_batch as T\n"
              f"T.run(T.toy_job({str(calls)!r}, die_at=int(sys.argv[1])), {out!r})\n")
    killed = subprocess.run([sys.executable, "-c", script, "3"], capture_output=True, text=True)
    assert killed.returncode == 9 and open(calls).read().split() == ["0", "1", "2", "3"]
    done = subprocess.run([sys.executable, "-c", script, "-1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert open(calls).read().split() == ["0", "1", "2", "3", "3", "4", "5"]   # only 3 (never written) ran again
    fingerprint, _, records = read_dirs([out])
    assert [r["value"] for r in records] == [2 * i for i in range(6)] and fingerprint["command"] == "toy"


def test_the_fingerprint_refuses_to_mix_settings(tiny_checkpoints, tiny_data, coco_data, cache_dir, tmp_path, capsys):
    argv = ["--checkpoints", tiny_checkpoints] + _commands(tiny_data, coco_data, cache_dir)["caption"] + ["--out",
                                                                                                       str(tmp_path)]
    _run(capsys, *argv)
    assert cli(argv + ["--greedy"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "other settings (decode.greedy changed)" in err and err.count("\n") == 1
    assert cli(["merge", str(tmp_path / "nothing")]) == 2 and "no such folder" in capsys.readouterr().err


def test_a_rerun_with_other_photos_or_data_never_returns_the_old_records(tiny_checkpoints, tiny_data, tmp_path,
                                                                         capsys):
    """caption A B --out D, then caption C D --out D: refused, naming what changed; so is the same
    path holding another photo, and triage over another data folder with the same split name."""
    images = sorted(glob.glob(os.path.join(tiny_data, "images", "*.jpg")))
    base = ["--checkpoints", tiny_checkpoints, "caption", "--model", "transformer", "--greedy", "--max-len", "4"]
    out = str(tmp_path / "D")
    first = _run(capsys, *base, *images[:2], "--out", out)
    assert cli(base + images[2:4] + ["--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "items.count" not in err and "items.digest changed" in err
    assert _run(capsys, *base, *images[:2], "--out", out) == first   # the same photos: every record reused
    swapped = tmp_path / "photo.jpg"
    shutil.copy(images[0], swapped)
    _run(capsys, *base, str(swapped), "--out", str(tmp_path / "E"))
    shutil.copy(images[1], swapped)   # another photo at the same path
    assert cli(base + [str(swapped), "--out", str(tmp_path / "E")]) == 2 and "items.digest" in capsys.readouterr().err
    other = tmp_path / "other-data"
    shutil.copytree(tiny_data, other)
    with open(other / "captions.txt", "a") as f:
        f.write(f"{os.path.basename(images[0])}#9\ta dog runs on the grass\n")
    triage = ["--checkpoints", tiny_checkpoints, "triage", "--model", "sat-soft", "--split", "train", "--limit", "2",
              "--out", str(tmp_path / "T")]
    _run(capsys, *triage, "--data", tiny_data)
    assert cli(triage + ["--data", str(other)]) == 2
    assert "data_digest" in capsys.readouterr().err


def test_a_record_is_reused_only_for_the_photo_it_is_about(tmp_path):
    """A file whose record at an index names another photo: that index is computed again."""
    calls, out = str(tmp_path / "calls.txt"), str(tmp_path / "out")
    job = toy_job(calls)
    run(job, out)
    path = os.path.join(out, "records.jsonl")
    lines = open(path).read().splitlines()
    wrong = json.loads(lines[3])
    wrong.update(id="another.jpg", value=-1)
    open(path, "w").write("\n".join(lines[:3] + [json.dumps(wrong)] + lines[4:]) + "\n")
    records = run(job, out)
    assert [r["value"] for r in records] == [2 * i for i in range(6)]
    assert open(calls).read().split()[6:] == ["2"]   # only the photo whose record named another


def test_a_failed_photo_is_retried_on_resume_and_merge_names_missing_and_failed(tmp_path, capsys, monkeypatch):
    import viewer.commands
    from viewer.commands import merge
    calls, out = str(tmp_path / "calls.txt"), str(tmp_path / "out")
    ids = ["photo0", "broken", "photo2"]
    first = run(toy_job(calls, ids=ids), out)
    assert "error" in first[1]
    again = run(toy_job(calls, ids=ids), out)   # still broken: tried once more in this run, still an error record
    assert open(calls).read().split() == ["0", "1", "2", "1"] and "error" in again[1]
    fixed = toy_job(calls, ids=ids)
    fixed.worker = functools.partial(toy_worker, calls, healed=True)
    records = run(fixed, out)
    assert [r.get("value") for r in records] == [0, 2, 4] and open(calls).read().split()[-1] == "1"
    assert [r.get("value") for r in read_dirs([out])[2]] == [0, 2, 4]   # the new record replaces the error record
    shards = str(tmp_path / "shards")
    run(toy_job(calls, ids=ids), shards, shard=(1, 2))
    monkeypatch.setitem(viewer.commands.BATCH_COMMANDS, "toy", type("Toy", (), {
        "reduce": staticmethod(lambda f, r: r), "write": staticmethod(lambda r, o, f: {})}))
    code = merge.run(type("Args", (), {"folders": [shards], "out": None, "json": False})())
    err = capsys.readouterr().err
    assert code == 2 and "1 photos: broken" in err and "missing" in err   # shard 2 (broken) never ran


def test_a_whole_last_record_without_its_newline_is_kept_once(tmp_path):
    calls, out = str(tmp_path / "calls.txt"), str(tmp_path / "out")
    run(toy_job(calls), out)
    path = os.path.join(out, "records.jsonl")
    text = open(path).read()
    open(path, "w").write(text.rstrip("\n"))   # the last record lost only its newline
    records = run(toy_job(calls), out)
    assert len(open(calls).read().split()) == 6   # nothing computed again
    assert [json.loads(line)["index"] for line in open(path).read().splitlines()[1:]] == list(range(6))
    assert [r["value"] for r in records] == [2 * i for i in range(6)]


# A toy job: the engine is generic, and faults are cheapest to inject where no model loads.

def toy_worker(calls: str, die_at: int = -1, marker: str | None = None, healed: bool = False,
               loads: str | None = None):
    if loads is not None:
        with open(loads, "a") as f:
            f.write("load\n")   # the model loaded: once per actor, and again when a dead one restarts

    def records(items):
        out = []
        for item in items:
            with open(calls, "a") as f:
                f.write(f"{item['index']}\n")
            if item["index"] == die_at and (marker is None or not os.path.exists(marker)):
                if marker is not None:
                    open(marker, "w").close()   # dies once: the retry finds the marker
                os._exit(9)   # as a kill or an out-of-memory would: no exception, no cleanup
            if item["id"] == "poison":
                os._exit(9)   # dies every time
            if item["id"] == "broken" and not healed:
                raise ValueError("cannot read this photo")
            out.append({"index": item["index"], "id": item["id"], "value": 2 * item["index"]})
        return out
    return records


def toy_job(calls: str, die_at: int = -1, marker: str | None = None, ids=None, loads: str | None = None) -> Job:
    import functools
    ids = ids or [f"photo{i}" for i in range(6)]
    return Job("toy", [{"index": i, "id": p} for i, p in enumerate(ids)], {"what": "double"},
               functools.partial(toy_worker, calls, die_at, marker, loads=loads), chunk=1)


def test_a_worker_killed_mid_run_is_retried_on_ray(ray_session, tmp_path):
    calls = str(tmp_path / "calls.txt")
    records = run(toy_job(calls, die_at=2, marker=str(tmp_path / "died")), str(tmp_path / "out"), "ray")
    assert [r["value"] for r in records] == [0, 2, 4, 6, 8, 10]
    assert os.path.exists(tmp_path / "died")
    assert open(calls).read().split().count("2") == 2   # it died at 2, and 2 ran again on a restarted actor


def test_a_photo_that_always_fails_is_an_error_record_not_a_crashed_run(ray_session, tmp_path):
    ids = ["photo0", "broken", "photo2", "poison", "photo4", "photo5", "photo6", "photo7"]
    loads = str(tmp_path / "loads.txt")
    for engine in ("local", "ray"):
        job = toy_job(str(tmp_path / f"calls-{engine}.txt"), ids=ids if engine == "ray" else ids[:3],
                      loads=loads if engine == "ray" else None)
        records = run(job, str(tmp_path / engine), engine)
        by_id = {r["id"]: r for r in records}
        assert by_id["broken"]["error"] == "ValueError: cannot read this photo"
        assert by_id["photo2"]["value"] == 4 and by_id["photo0"]["value"] == 0
    assert "error" in by_id["poison"] and by_id["photo7"]["value"] == 14   # the run went on past it
    # the model is loaded once per actor, and again only when the poison photo killed it: never per photo
    deaths = open(tmp_path / "calls-ray.txt").read().split().count("3")
    actors = 2   # the one Ray Data worker, then the one actor the photos left run on alone (--workers 1)
    assert open(loads).read().split().count("load") <= actors + deaths


def test_a_second_run_into_one_folder_is_refused_while_the_first_lives_and_takes_over_a_dead_ones_lock(tmp_path):
    from viewer.batch.records import file_name
    out, calls = str(tmp_path / "out"), str(tmp_path / "calls.txt")
    os.makedirs(out)
    lock = os.path.join(out, file_name(None) + ".lock")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])   # the first run, still going
    try:
        with open(lock, "w") as f:
            f.write(str(other.pid))
        with pytest.raises(ValueError, match=f"another run \\(process {other.pid}\\) is writing"):
            run(toy_job(calls), out)
        assert not os.path.exists(calls)   # nothing computed twice
    finally:
        other.kill()
        other.wait()
    records = run(toy_job(calls), out)   # its process is gone: the lock is taken over
    assert [r["value"] for r in records] == [2 * i for i in range(6)]
    assert not os.path.exists(lock) and os.listdir(out) == [file_name(None)]   # released, and no other file left
