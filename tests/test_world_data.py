"""`world-data` (data/world.py) on tiny made-up inputs: solid-colour photos whose red level says which
objects a fake detector "sees", and a dozen captions; one run through the CLI with the real detector."""
from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
from PIL import Image

from viewer.__main__ import main
from viewer.data.chair import COCO_CLASSES, mentions
from viewer.data import world
from viewer.engine.vision.boxes import Regions
from viewer.engine.vocab import tokenize

# photo i (red level 20 * i) -> what the fake detector finds in it; "dog" at 0.3 is under the threshold
SEEN = [[("dog", 0.9), ("frisbee", 0.8)], [("person", 0.9), ("dog", 0.3)], [("pizza", 0.7), ("dining table", 0.6)],
        [], [("cat", 0.95)], [("person", 0.6), ("frisbee", 0.55), ("dog", 0.7)], [("cat", 0.8), ("couch", 0.5)],
        [("person", 0.99)], [("pizza", 0.9)], [("dog", 0.6)], [("surfboard", 0.7)], [("cat", 0.6), ("dog", 0.6)]]
COCO_TEXT = ["A dog catches a frisbee in the park.", "A dog runs on the grass.", "A slice of pizza.",
             "A pizza on a table.", "A cat sleeps on a couch.", "A cat looks out a window.", "A view of the mountains."]
FLICKR30K_TEXT = ["A man throws a frisbee to his dog.", "A man stands on the street.", "Two men and a dog play.",
                  "A woman rides a wave on a surfboard.", "A cat and a dog share a bed."]
THRESHOLD = 0.5


class FakeDetector:
    """`detect` by table, counting its calls; raises KeyboardInterrupt (a kill) after `stop` calls."""

    def __init__(self, stop: int | None = None):
        self.calls, self.stop = 0, stop

    def __call__(self, rgb: np.ndarray) -> Regions:
        if self.calls == self.stop:
            raise KeyboardInterrupt
        self.calls += 1
        seen = SEEN[int(rgb[0, 0, 0]) // 20] + [("whole image", 1.0)]   # a context region: never a label
        return Regions(np.tile(np.array([[0.1, 0.1, 0.9, 0.9]], np.float32), (len(seen), 1)),
                       [label for label, _ in seen], np.array([score for _, score in seen], np.float32))


def write_lines(path, lines, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open(path, "wt", encoding="utf-8") if gz else open(path, "w", encoding="utf-8")) as f:
        f.write("".join(line + "\n" for line in lines))


@pytest.fixture
def inputs(tmp_path):
    """The four folders `world-data` reads, in the shared data's layouts."""
    names = [f"COCO_val2014_{i:012d}.png" for i in range(len(SEEN))]
    (tmp_path / "coco" / "images").mkdir(parents=True)
    for i, name in enumerate(names):
        Image.new("RGB", (32, 24), (20 * i, 0, 0)).save(tmp_path / "coco" / "images" / name)
    write_lines(tmp_path / "coco" / "photos.txt", names[::-1])
    write_lines(tmp_path / "coco-captions" / "captions.txt.gz",
                [f"val2017_{i:012d}#0\t{c}" for i, c in enumerate(COCO_TEXT)], gz=True)
    write_lines(tmp_path / "flickr30k" / "captions.txt.gz", [f"{i}.jpg#0\t{c}" for i, c in enumerate(FLICKR30K_TEXT)],
                gz=True)
    write_lines(tmp_path / "flickr8k" / "captions.txt", ["a.jpg#0\ta view of the hills", "b.jpg#0\ta long view"])
    write_lines(tmp_path / "flickr8k" / "train_images.txt", ["a.jpg", "b.jpg"])
    return {"coco": str(tmp_path / "coco"), "coco_captions": str(tmp_path / "coco-captions"),
            "flickr30k": str(tmp_path / "flickr30k"), "flickr8k": str(tmp_path / "flickr8k")}


def build(inputs, out, detect, **settings):
    settings = {"threshold": THRESHOLD, "choice_size": 3, "min_count": 1, "log": lambda message: None, **settings}
    return world.build(**inputs, out=str(out), detect=detect, **settings)


def read(out, name):
    with open(out / name, encoding="utf-8") as f:
        return json.load(f)


def test_no_choice_photo_reaches_training(inputs, tmp_path):
    """The choice part is labelled (to choose on) but gets no pseudo-captions, though its labels would earn some."""
    out = tmp_path / "out"
    report = build(inputs, out, FakeDetector())
    parts = read(out, "split.json")
    train, choice = set(parts["train"]), set(parts["choice"])
    assert len(choice) == 3 and not train & choice and len(train | choice) == len(SEEN)
    pseudo = read(out, "pseudo.json")["captions"]
    assert pseudo and set(pseudo) <= train
    labels = world.load_labels(str(out))
    assert choice <= set(labels)
    corpus = world.Corpus(COCO_TEXT + FLICKR30K_TEXT)
    assert world.pseudo_captions(sorted(choice), labels, corpus, THRESHOLD), "a choice photo would have earned some"
    assert (report["train"], report["choice"], report["photos labelled"]) == (len(SEEN) - 3, 3, len(SEEN))


def test_split_ignores_listing_order_and_follows_its_seed():
    ids = [f"COCO_train2014_{i:012d}" for i in range(200)]
    shuffled = random.Random(7).sample(ids, len(ids))
    assert world.split(ids, 20, seed=0) == world.split(shuffled, 20, seed=0) == world.split(ids[::-1], 20, seed=0)
    assert world.split(ids, 20, seed=0)[1] != world.split(ids, 20, seed=1)[1]
    with pytest.raises(ValueError):
        world.split(ids[:5], 5)


def test_the_split_is_written_with_its_seed(inputs, tmp_path):
    """photos.txt lists the photos backwards in the fixture; the split is still the sorted ids' draw."""
    build(inputs, tmp_path / "out", FakeDetector(), seed=3)
    parts = read(tmp_path / "out", "split.json")
    ids = [f"COCO_val2014_{i:012d}" for i in range(len(SEEN))]
    assert (parts["seed"], parts["choice_size"]) == (3, 3)
    assert (parts["train"], parts["choice"]) == tuple(map(list, world.split(ids, 3, seed=3)))


def test_the_vocabulary_holds_every_class_word_and_its_plural_even_unsaid():
    vocab, added = world.vocabulary(["a view of the hills"] * 3, min_count=2)
    assert vocab.words[:9] == ["<pad>", "<start>", "<end>", "<unk>", "a", "hills", "of", "the", "view"]
    for name in COCO_CLASSES:
        assert all(w in vocab.index for w in name.split()), name
    for word in ("hot", "dog", "dogs", "teddy", "bears", "people", "mice", "knives", "buses", "benches", "skis",
                 "scissors", "sheep", "tvs", "tables", "glasses"):
        assert word in vocab.index and word in added, word
    counted, _ = world.vocabulary(["two dogs and a dog", "a dog"], min_count=2)
    assert counted.words[4:6] == ["a", "dog"] and "dogs" in counted.index   # said once, yet in


def test_pseudo_captions_name_only_labelled_classes(inputs, tmp_path):
    out = tmp_path / "out"
    build(inputs, out, FakeDetector(), choice_size=1, keep=3)
    labels = world.load_labels(str(out))
    pseudo = read(out, "pseudo.json")["captions"]
    for pid, captions in pseudo.items():
        allowed = world.labels_at(labels[pid], THRESHOLD)
        named = [{m.coco_class for m in mentions(tokenize(c))} for c in captions]
        assert 0 < len(captions) <= 3 and all(n and n <= allowed for n in named), (pid, captions)
        assert [len(n) for n in named] == sorted((len(n) for n in named), reverse=True)   # naming most first
    assert all("dog" not in tokenize(c) for c in pseudo.get("COCO_val2014_000000000001", []))   # dog at 0.3
    assert "COCO_val2014_000000000003" not in pseudo   # nothing seen, nothing said
    assert pseudo["COCO_val2014_000000000005"][0] == "A man throws a frisbee to his dog."   # names all three


def test_a_rerun_resumes_without_detecting_again(inputs, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        build(inputs, out, FakeDetector(stop=5), batch=2)   # killed in the third batch: two batches kept
    assert len(world.load_labels(str(out))) == 4
    again = FakeDetector()
    first = build(inputs, out, again, batch=2)
    assert again.calls == len(SEEN) - 4
    idle = FakeDetector()
    assert build(inputs, out, idle, batch=2) == first and idle.calls == 0
    assert not list((out / "labels").glob("*.part"))


def test_the_command_runs_the_real_detector(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["world-data", "--coco", inputs["coco"], "--captions", inputs["coco_captions"],
                 "--flickr30k", inputs["flickr30k"], "--flickr8k", inputs["flickr8k"], "--out", str(out),
                 "--choice", "2", "--min-count", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == read(out, "report.json")
    assert (report["photos labelled"], report["train"], report["choice"], report["seed"]) == (len(SEEN), 10, 2, 0)
