"""The COCO choice part's measure (analysis/world_eval.py): proxy CHAIR and recall against the detector,
worked by hand, and `world-eval` run on two photos with a shipped model and retrieval."""
from __future__ import annotations

import gzip
import json

from viewer.__main__ import main
from viewer.analysis.world_eval import photo_row, proxy_block, retrieval_captions
from viewer.data.world import Corpus

from test_world_training import world_folder

DETS = [{"label": "cat", "score": 0.9, "box": [0, 0, 1, 1]}, {"label": "couch", "score": 0.3, "box": [0, 0, 1, 1]},
        {"label": "remote", "score": 0.6, "box": [0, 0, 1, 1]}]


def test_a_caption_is_scored_against_the_detector_by_hand():
    row = photo_row("a cat and a dog on a couch", DETS)
    # dog: not found even at 0.2 (unseen); couch: found at 0.3 (not unseen, not confident); cat, remote confident
    assert (row["mentions"], row["unseen"], row["confident"], row["named"]) == (3, ["dog"], ["cat", "remote"], ["cat"])
    rows = [row, photo_row("two cats and a remote", DETS), photo_row("a view of the hills", [])]
    block = proxy_block(rows, draws=200)
    assert block["CHAIR_s"] == round(1 / 3, 4) and block["CHAIR_i"] == round(1 / 5, 4)   # 1 of 5 mentions
    assert block["recall"] == round(3 / 4, 4) and block["photos"] == 3
    lo, hi = block["recall_95"]
    assert lo <= block["recall"] <= hi and 0 <= lo and hi <= 1
    assert proxy_block(rows, draws=200) == block   # seeded


def test_retrieval_names_the_confident_classes_and_nothing_else():
    corpus = Corpus(["a cat on a couch", "a cat holds a remote", "a dog and a cat", "a cat sleeps"])
    got = retrieval_captions(["p", "q"], {"p": DETS, "q": []}, corpus)
    assert got == {"p": "a cat holds a remote", "q": ""}


def test_the_command_scores_a_shipped_model_and_retrieval(tmp_path, capsys):
    out, coco = world_folder(tmp_path, {"coffee.jpg": ["a cup of coffee"]}, {"coffee.jpg": ["cup"], "chelsea.jpg": ["cat"]},
                             ["chelsea.jpg"], ["a", "cup"])
    for name, lines in [("coco-captions", ["1#0\ta cat sits on a chair", "2#0\ta cat sleeps"]),
                        ("flickr30k", ["3#0\ta dog runs"])]:
        (tmp_path / name).mkdir()
        with gzip.open(tmp_path / name / "captions.txt.gz", "wt") as f:
            f.write("\n".join(lines) + "\n")
    report = tmp_path / "report" / "choice.json"
    assert main(["world-eval", "--world", out, "--coco", coco, "--captions", str(tmp_path / "coco-captions"),
                 "--flickr30k", str(tmp_path / "flickr30k"), "--models", "updown-copy", "--out", str(report),
                 "--cache", str(tmp_path / "cache")]) == 0
    got = json.loads(report.read_text())
    assert set(got["configurations"]) == {"retrieval", "updown-copy plain", "updown-copy guided"}
    assert got["photos"] == 1 and all(c["photos"] == 1 for c in got["configurations"].values())
    captions = json.loads((tmp_path / "report" / "choice.captions.json").read_text())
    assert captions["retrieval"] == {"COCO_val2014_000000000001": "a cat sleeps"}
    assert got["configurations"]["retrieval"]["recall"] == 1.0 and got["configurations"]["retrieval"]["CHAIR_s"] == 0
    # the Flickr8k model sees a person in the cat photo; guidance rules out what the detector does not see
    plain, guided = got["configurations"]["updown-copy plain"], got["configurations"]["updown-copy guided"]
    assert plain["CHAIR_s"] == 1 and guided["CHAIR_s"] == 0 and guided["mentions"] == 0
