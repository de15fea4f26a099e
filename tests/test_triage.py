"""Batch triage on the tiny dataset: every photo ranked, reported in HTML and CSV."""
import csv
import json
import os

from viewer.data.datasets import load_dataset
from viewer.analysis.triage import rank, triage, write_report


def test_triage_end_to_end(captioner, tiny_data, tmp_path):
    data = load_dataset(tiny_data)
    paths = data.split("train")
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"nope")
    refs = {p: data.captions[p] for p in paths}
    rows = triage(captioner, "sat-soft", paths + [str(broken)], refs, log=lambda *a: None)
    assert len(rows) == len(paths) + 1
    ranked = rank(rows, "score")
    scores = [r["CIDEr"] for r in ranked if "CIDEr" in r]
    assert scores == sorted(scores) and len(scores) == len(paths)
    assert ranked[-1]["image"] == str(broken) and "not an image" in ranked[-1]["error"]
    by_conf = [r["confidence"] for r in rank(rows, "confidence") if "confidence" in r]
    assert by_conf == sorted(by_conf)
    out = write_report(ranked, str(tmp_path / "report"), "sat-soft", "score")
    page = open(out["html"], encoding="utf-8").read()
    for p in paths:
        assert p in page
        assert data.captions[p][0] in page                 # references are shown
    assert page.count("data:image/jpeg;base64,") == 2 * len(paths)   # thumbnail + word strip, inline
    with open(out["csv"]) as f:
        table = list(csv.DictReader(f))
    assert [r["image"] for r in table] == [r["image"] for r in ranked]
    assert [json.loads(line)["image"] for line in open(out["traces"])] == [r["image"] for r in ranked[:-1]]
    assert all(r["grounding"] is None or 0.0 <= r["grounding"] <= 1.0 for r in rows if "caption" in r)
    # why a word went wrong: only object words neither detected nor named by a reference, each with a cause
    from viewer.analysis.grounding import word_class
    from viewer.analysis.hallucination import named
    for r in (r for r in rows if r.get("why_wrong")):
        for part in r["why_wrong"].split("; "):
            word, why = part.split(": ", 1)
            assert word in r["not_detected"].split() and word_class(word) not in named(" ".join(refs[r["image"]]))
            assert why.startswith(("said from the words before it", "looked at a", "looked at nothing"))


def test_triage_sorts_by_how_much_the_object_words_were_seen(captioner, tiny_data, monkeypatch):
    import numpy as np
    from viewer.analysis import triage as T
    data = load_dataset(tiny_data)
    paths = data.split("train")
    rows = triage(captioner, "sat-soft", paths, log=lambda *a: None)
    photo = T.load_photo(paths[0])
    trace = captioner.caption([photo], "sat-soft", T.DecodeSettings())[0][0]
    dependence = T.seen_dependence(T.Pipeline(captioner, photo, "sat-soft", trace.caption))
    objects = [d for s, d in zip(trace.steps, dependence) if T.word_class(s.word)]
    first = next(r for r in rows if r["image"] == paths[0])
    assert first["seen"] == (round(float(min(objects)), 4) if objects else None)
    seen = [r["seen"] for r in rank(rows, "seen") if r.get("seen") is not None]
    assert seen == sorted(seen) and len(seen) >= 1
    # an object word whose log-prob barely moves when the photo is blurred away or removed is "said, not seen"
    monkeypatch.setattr(T, "seen_dependence", lambda pipe: np.zeros(pipe.steps))
    flagged = triage(captioner, "sat-soft", paths, log=lambda *a: None)
    assert any(r["said_not_seen"] for r in flagged) and all(r["seen"] in (None, 0.0) for r in flagged)
    # with no references, every object word the detector missed is unsupported: here said, not seen
    for r in flagged:
        whys = [part.split(": ", 1) for part in r["why_wrong"].split("; ")] if r["why_wrong"] else []
        assert [w for w, _ in whys] == r["not_detected"].split()
        assert all(why.startswith("said from the words before it") for _, why in whys)


def test_the_app_lists_and_reads_triage_runs_by_name_only(captioner, tiny_data, tmp_path):
    import pytest
    from viewer.app.session import Studio
    data = load_dataset(tiny_data)
    paths = data.split("dev")
    rows = rank(triage(captioner, "updown", paths, {p: data.captions[p] for p in paths}, log=lambda *a: None))
    studio = Studio(captioner)
    studio.triage_dir = str(tmp_path / "triage")
    write_report(rows, os.path.join(studio.triage_dir, "updown-dev"), "updown", "score")
    assert studio.triage_runs() == ["updown-dev"]
    table = studio.triage_rows("updown-dev")
    assert [r["image"] for r in table] == [r["image"] for r in rows] and table[0]["model"] == "updown"
    for trick in ("../updown-dev", "/etc", "updown-dev/../../x"):
        with pytest.raises(ValueError, match="no triage run"):
            studio.triage_rows(trick)
    studio.close()
