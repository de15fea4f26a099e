"""The shipped models in checkpoints/: present, small, documented, and captioning the example photos."""
import os
import subprocess
import sys

from viewer.engine import checkpoints

from conftest import ASSETS, SHIPPED, ROOT


def test_every_default_model_is_shipped_small_and_scored():
    found = checkpoints.available()
    assert set(SHIPPED) <= set(found), f"missing shipped models: {set(SHIPPED) - set(found)}"
    for name in SHIPPED:
        meta = checkpoints.read_meta(found[name])
        assert meta["model_type"] == name
        assert os.path.getsize(found[name]) <= 20 * 2**20
        assert meta["dev_metrics"]["BLEU-4"] > 10 and meta["dev_metrics"]["CIDEr"] > 20
        assert "flickr8k" in meta["training"]["data"].lower()
        forced = meta["dev_metrics"]["grounding"]["references_forced"]   # grounding is reported like BLEU
        assert forced["detected"] > 1000 and 0 < forced["mass_in_box"] <= 1 and 0 < forced["pointing"] <= 1
    card = open(os.path.join(ROOT, "checkpoints", "README.md")).read()
    assert all(name in card for name in SHIPPED) and "Hodosh" in card


def test_cli_captions_the_example_photos_with_each_shipped_model():
    photos = sorted(os.path.join(ASSETS, n) for n in os.listdir(ASSETS) if n.endswith(".jpg"))
    for model in SHIPPED:
        args = [sys.executable, "-m", "viewer", "caption", *photos] + ([] if model == "sat-soft" else ["--model", model])
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        captions = [line.split(": ", 1)[1] for line in proc.stdout.strip().splitlines()]
        assert len(captions) == len(photos) and all(len(c.split()) >= 3 for c in captions)
        assert len(set(captions)) > 1, "the same caption for every photo"
