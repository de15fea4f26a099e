"""Grounding against the user's own boxes (viewer/analysis/user_boxes.py)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from viewer.analysis import user_boxes as ub
from viewer.engine.images import GRID, load_photo

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHIPPED = os.path.join(ROOT, "checkpoints", "sat-soft.safetensors")
BOXES = os.path.join(HERE, "data", "user_boxes.json")


def boxed(boxes: dict, width=140, height=70) -> ub.BoxedPhoto:
    return ub.BoxedPhoto("p.jpg", "p.jpg", "x", {k: np.array(v, float) for k, v in boxes.items()}, width, height)


def peaked(cells: list[tuple[int, int]], weights=None) -> np.ndarray:
    m = np.zeros((GRID, GRID))
    for (r, c), w in zip(cells, weights or [1.0] * len(cells)):
        m[r, c] = w
    return m / m.sum()


def test_match_key_exact_and_simple_plurals():
    keys = {"dog", "box", "glasses"}
    assert ub.match_key("dog", keys) == "dog" and ub.match_key("Dogs", keys) == "dog"
    assert ub.match_key("boxes", keys) == "box" and ub.match_key("glasses", keys) == "glasses"
    assert ub.match_key("cat", keys) is None and ub.match_key("s", {""}) is None


def test_known_answers_on_constructed_maps():
    # a 140x70 photo: cells are 10x5 px. "dog" box = cells rows 2..3, cols 0..1 (x 0..20, y 10..20)
    photo = boxed({"dog": [[0, 10, 20, 20]], "ball": [[60, 30, 80, 40]]})   # ball covers the centre (70, 35)
    words = ["a", "dog", "and", "a", "ball", "<end>"]
    maps = np.stack([peaked([(0, 0)]),
                     peaked([(2, 0), (2, 1), (9, 9)], [0.5, 0.25, 0.25]),   # peak inside, 3/4 of mass inside
                     peaked([(0, 0)]), peaked([(0, 0)]),
                     peaked([(0, 13)]),                                       # ball: peak far away, mass 0
                     peaked([(7, 7)])])
    g = ub.ground_maps(words, maps, photo)
    assert [(x.step, x.word, x.coco_class) for x in g] == [(1, "dog", "dog"), (4, "ball", "ball")]
    dog, ball = g
    assert dog.hit is True and dog.inside == pytest.approx(0.75) and dog.centre_hit is False
    assert dog.uniform == pytest.approx(4 / 196) and dog.area == pytest.approx(4 / 196)
    assert ball.hit is False and ball.inside == 0 and ball.centre_hit is True
    s = ub.summarise(g)
    assert s["words"] == 2 and s["pointing"] == 0.5 and s["mass_in_box"] == pytest.approx(0.375)
    assert s["pointing_centre_baseline"] == 0.5
    assert s["off_centre_words"] == 1 and s["pointing_off_centre"] == 1.0
    assert s["mass_uniform_baseline"] == pytest.approx((4 / 196 + 4 / 196) / 2, abs=1e-4)
    assert s["pointing_ci"] == [0.5, 0.5]   # one photo: the bootstrap can only resample it
    assert set(s) == set(ub.SUMMARY_KEYS)
    json.dumps(s)


def test_partial_cells_count_by_area_and_empty_maps_miss():
    # cell (0, 0) of a 140x70 photo is x 0..10, y 0..5 with its centre at (5, 2.5)
    half = ub.ground_maps(["dog"], peaked([(0, 0)])[None], boxed({"dog": [[0, 0, 5, 5]]}))[0]
    assert half.inside == pytest.approx(0.5) and half.hit is True   # boxes hold their edges
    short = ub.ground_maps(["dog"], peaked([(0, 0)])[None], boxed({"dog": [[0, 0, 4, 5]]}))[0]
    assert short.hit is False and short.inside == pytest.approx(0.5)   # masses are drawn on grounding.RASTER
    # (112 px a side): x2 = 4/140 of the side lands on raster column 3.2, rounded out to 4 of the cell's 8
    empty = ub.ground_maps(["dog"], np.zeros((1, GRID, GRID)), boxed({"dog": [[0, 0, 140, 70]]}))[0]
    assert empty.hit is False and empty.inside == 0 and empty.centre_hit is True and empty.uniform == 1


def test_bootstrap_over_photos():
    photo = boxed({"dog": [[0, 0, 20, 10]]})
    hit, miss = peaked([(0, 0)]), peaked([(13, 13)])
    items = []
    for i, m in enumerate([hit, hit, miss, miss]):
        items += ub.ground_maps(["dog"], m[None], photo, image=i)
    s = ub.summarise(items)
    assert s["pointing"] == 0.5 and s["pointing_ci"][0] < 0.5 < s["pointing_ci"][1]
    assert s["pointing_centre_baseline"] == 0 and s["pointing_centre_baseline_ci"] == [0.0, 0.0]


# --------------------------------------------------------------------------------------------
# Bad files: each gives one BoxFileError naming its problem

PHOTO = os.path.join(ROOT, "assets", "chelsea.jpg")   # 451 x 300


def write(tmp_path, content) -> str:
    p = tmp_path / "boxes.json"
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(p)


def good(**over):
    entry = {"caption": "a cat with green eyes", "boxes": {"cat": [[0, 0, 395, 300]]}}
    entry.update(over)
    return {PHOTO: entry}


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ([1, 2], "must be a JSON object"),
    ({}, "lists no photos"),
    ({PHOTO: "a cat"}, "must be an object"),
    ({PHOTO: {"boxes": {"cat": [[0, 0, 1, 1]]}}}, 'missing "caption"'),
    (good(caption="   "), "at least one word"),
    ({PHOTO: {"caption": "a cat"}}, 'missing "boxes"'),
    (good(boxes={}), '"boxes" must be a non-empty object'),
    (good(boxes={"cat": [[10, 0, 5, 20]]}), "needs x2 > x1"),
    (good(boxes={"cat": [[0, 20, 5, 20]]}), "needs x2 > x1 and y2 > y1"),
    (good(boxes={"cat": [[0, 0, 5]]}), "not a box [x1, y1, x2, y2]"),
    (good(boxes={"cat": [[0, 0, "5", 5]]}), "not a box"),
    (good(boxes={"cat": []}), "non-empty list"),
    (good(boxes={"cat": [[0, 0, 500, 300]]}), "outside the 451x300 photo"),
    (good(boxes={"dog": [[0, 0, 5, 5]]}), "'dog' in \"boxes\" is not in the caption"),
    (good(box={"cat": [[0, 0, 5, 5]]}), "unknown field 'box'"),
    ({"no_such_photo.jpg": good()[PHOTO]}, "the photo does not exist"),
])
def test_bad_files_give_one_clear_error(tmp_path, content, message):
    with pytest.raises(ub.BoxFileError) as err:
        ub.load_box_file(write(tmp_path, content))
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_missing_file_and_not_a_photo(tmp_path):
    with pytest.raises(ub.BoxFileError, match="no such boxes file"):
        ub.load_box_file(str(tmp_path / "nope.json"))
    (tmp_path / "fake.jpg").write_text("not an image")
    with pytest.raises(ub.BoxFileError, match="not an image file"):
        ub.load_box_file(write(tmp_path, {"fake.jpg": good()[PHOTO]}))


def test_relative_paths_plurals_and_single_boxes(tmp_path):
    rel = os.path.relpath(PHOTO, tmp_path)
    entry = {"caption": "Two cats' eyes.", "boxes": {"Cat": [0, 0, 395, 300], "eye": [[135, 82, 205, 148]]}}
    [bp] = ub.load_box_file(write(tmp_path, {rel: entry}))
    assert bp.path == os.path.join(str(tmp_path), rel) and (bp.width, bp.height) == (451, 300)
    assert bp.boxes["cat"].shape == (1, 4) and np.allclose(bp.unit_boxes("cat"), [[0, 0, 395 / 451, 1]])


def test_shipped_box_file_is_valid():
    photos = ub.load_box_file(BOXES)
    assert len(photos) >= 3 and all(2 <= len(p.boxes) <= 4 for p in photos)


# --------------------------------------------------------------------------------------------
# A real run: a shipped model, attention only

@pytest.mark.skipif(not os.path.exists(SHIPPED), reason="shipped checkpoints absent")
def test_shipped_sat_soft_on_an_asset_photo(tmp_path):
    from viewer.engine.pipeline import Captioner
    rel = os.path.relpath(PHOTO, tmp_path)
    path = write(tmp_path, {rel: {"caption": "a cat with green eyes and a pink nose",
                                  "boxes": {"cat": [[0, 0, 395, 300]],
                                            "eye": [[135, 82, 205, 148], [295, 108, 345, 165]],
                                            "nose": [[235, 222, 295, 265]]}}})
    c = Captioner(device="cpu")
    with pytest.raises(ValueError, match="unknown method"):
        ub.evaluate_user_boxes(c, "sat-soft", path, ("attention", "saliency"))
    out = ub.evaluate_user_boxes(c, "sat-soft", path)
    json.dumps(out)
    assert out["methods"] == ["attention"] and out["photos"] == 1 and out["boxed_words"] == 3
    block = out["grounding"]["attention"]
    assert block["words"] == 3 and 0 <= block["mass_in_box"] <= 1
    assert block["pointing"] in (0.0, 0.3333, 0.6667, 1.0)
    assert block["pointing_centre_baseline"] == pytest.approx(1 / 3, abs=1e-4)   # only the cat box holds the centre
    assert block["off_centre_words"] == 2
    words = out["per_photo"][0]["words"]
    assert [w["word"] for w in words] == ["cat", "eyes", "nose"] and words[1]["box_word"] == "eye"
    cat = words[0]
    assert cat["uniform_mass"] == pytest.approx(395 / 451, abs=0.02)
    # every figure again, by hand from the forced trace: the word's map (its step's), the peak cell's
    # centre in the word's boxes, and the map's mass over each cell's exact overlap with them
    trace = c.force([load_photo(PHOTO)], "sat-soft", ["a cat with green eyes and a pink nose"])[0]
    w, h = trace.width, trace.height
    boxes = {"cat": [[0, 0, 395, 300]], "eyes": [[135, 82, 205, 148], [295, 108, 345, 165]], "nose": [[235, 222, 295, 265]]}
    for row in words:
        grid = trace.steps[row["step"]].attention.reshape(14, 14).astype(np.float64)
        r, col = np.unravel_index(int(grid.argmax()), grid.shape)
        cx, cy = (col + 0.5) * w / 14, (r + 0.5) * h / 14
        hit = any(x1 <= cx <= x2 and y1 <= cy <= y2 for x1, y1, x2, y2 in boxes[row["word"]])
        assert row["methods"]["attention"]["pointing"] == hit
        inside = np.zeros((14, 14))
        for i in range(14):
            for j in range(14):
                cell = np.zeros((h, w), bool)
                cell[round(i * h / 14):round((i + 1) * h / 14), round(j * w / 14):round((j + 1) * w / 14)] = True
                union = np.zeros((h, w), bool)
                for x1, y1, x2, y2 in boxes[row["word"]]:
                    union[y1:y2, x1:x2] = True
                inside[i, j] = (cell & union).sum() / max(cell.sum(), 1)
        assert row["methods"]["attention"]["mass_in_box"] == pytest.approx(float((grid * inside).sum()), abs=0.03)


def test_cli_evaluate_boxes_json_and_one_line_errors(tmp_path, capsys):
    from viewer.__main__ import main as cli
    boxes = os.path.join(os.path.dirname(__file__), "data", "user_boxes.json")
    assert cli(["evaluate", "--model", "sat-soft", "--boxes", boxes, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "sat-soft" and out["methods"] == ["attention"] and out["boxed_words"] == 22
    g = out["grounding"]["attention"]
    assert 0 <= g["pointing"] <= 1 and g["pointing_ci"][0] <= g["pointing"] <= g["pointing_ci"][1]
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1')
    assert cli(["evaluate", "--model", "sat-soft", "--boxes", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "not valid JSON" in err[0]
