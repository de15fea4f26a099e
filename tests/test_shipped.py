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
        assert "flickr8k" in meta["training"]["data"].lower()
    card = open(os.path.join(ROOT, "checkpoints", "README.md")).read()
    assert all(name in card for name in SHIPPED) and "Hodosh" in card


def _table_rows(text: str, header_start: str) -> dict[str, list[str]]:
    """The rows of the markdown table whose header line starts with `header_start`, by model name."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_shipped_dev_scores_in_metadata_are_the_ones_the_readmes_report():
    """The dev scores stored in each file's metadata (what `viewer models` prints) are exactly the
    numbers of the main README's table and the model card's report-half tables."""
    found = checkpoints.available()
    readme = _table_rows(open(os.path.join(ROOT, "docs", "models.md")).read(), "| model | BLEU-4 | METEOR | CIDEr | pointing | top det.")
    card_text = open(os.path.join(ROOT, "checkpoints", "README.md")).read()
    card = {**_table_rows(card_text, "| model | BLEU-4 | METEOR | CIDEr | pointing | centre | top detection | off-centre pointing | top detection off-centre"),
            **_table_rows(card_text, "| model | BLEU-4 | METEOR | CIDEr | pointing | centre | top detection | off-centre pointing | mass in box | uniform")}
    card_rows = {"sat-soft": "`sat-soft` shipped (a = 0.75)", "sat-hard": "`sat-hard` shipped (a = 1)",
                 "updown": "`updown` shipped (a = 0.75)", "transformer": "`transformer` **shipped** (0.5 M + 0.5 G)"}
    for name in SHIPPED:
        dev = checkpoints.read_meta(found[name])["dev_metrics"]
        forced = dev["grounding"]["references_forced"]
        assert forced["object_words"] == 3220 and forced["detected"] == 2826   # "3,220 words" in the card
        bleu, meteor, cider, pointing, _top, off_centre, mass = readme[f"`{name}`"][:7]
        assert (float(bleu), float(meteor), float(cider)) == (dev["BLEU-4"], dev["METEOR"], dev["CIDEr"]), name
        assert float(pointing) == round(forced["pointing"], 3) and float(off_centre) == round(forced["pointing_off_centre"], 3)
        assert float(mass.split()[0]) == round(forced["mass_in_box"], 3)
        assert float(mass.split()[1].strip("()")) == round(forced["mass_uniform_baseline"], 3)
        row = card[card_rows[name]]
        assert (float(row[0]), float(row[1]), float(row[2])) == (dev["BLEU-4"], dev["METEOR"], dev["CIDEr"]), name
        lo, hi = (round(v, 3) for v in forced["pointing_ci"])
        assert row[3].startswith(f"{round(forced['pointing'], 3):.3f} [{lo:.3f}, {hi:.3f}]"), (name, row[3])


def test_cli_captions_the_example_photos_with_each_shipped_model():
    photos = sorted(os.path.join(ASSETS, n) for n in os.listdir(ASSETS) if n.endswith(".jpg"))
    for model in SHIPPED:
        args = [sys.executable, "-m", "viewer", "caption", *photos] + ([] if model == "sat-soft" else ["--model", model])
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        captions = [line.split(": ", 1)[1] for line in proc.stdout.strip().splitlines()]
        assert len(captions) == len(photos) and all(len(c.split()) >= 3 for c in captions)
        assert len(set(captions)) > 1, "the same caption for every photo"
