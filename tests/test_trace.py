"""AttentionTrace: JSON round trip and the README schema."""
import numpy as np
import pytest

from viewer.engine.decoding import DecodeSettings
from viewer.engine.trace import AttentionTrace
from viewer.engine.vision.boxes import CONTEXT

from conftest import MODEL_TYPES


@pytest.mark.parametrize("model", MODEL_TYPES)
def test_json_round_trip(captioner, photo, model):
    trace = captioner.caption([photo], model, DecodeSettings(strategy="beam"))[0][0]
    obj = trace.to_json()
    again = AttentionTrace.from_json(obj)
    assert again.caption == trace.caption and again.model == trace.model
    assert (again.width, again.height) == (photo.width, photo.height)
    for a, b in zip(trace.steps, again.steps):
        assert a.word == b.word and np.allclose(a.attention, b.attention, atol=1e-5)
        assert a.sample == b.sample
    assert again.to_json() == obj
    assert again.attends_to is trace.attends_to and obj["attends_to"] in ("grid", "regions")   # stored as its string
    with pytest.raises(ValueError):
        AttentionTrace.from_json({**obj, "attends_to": "pixels"})


def test_schema_of_grid_and_region_steps(captioner, photo):
    grid = captioner.caption([photo], "sat-hard", DecodeSettings(strategy="greedy"))[0][0].to_json()
    assert set(grid) >= {"image", "width", "height", "model", "caption", "steps"}
    step = grid["steps"][0]
    assert len(step["grid"]) == 14 and all(len(r) == 14 for r in step["grid"])
    assert np.isclose(np.sum(step["grid"]), 1.0, atol=1e-4)
    assert len(step["sample"]) == 2 and all(0 <= v < 14 for v in step["sample"])
    regions = captioner.caption([photo], "updown", DecodeSettings(strategy="greedy"))[0][0].to_json()
    rstep = regions["steps"][0]
    assert "grid" not in rstep
    for r in rstep["regions"]:
        x1, y1, x2, y2 = r["box"]
        assert 0 <= x1 < x2 <= photo.width and 0 <= y1 < y2 <= photo.height   # original-photo pixels
        assert set(r) == {"box", "label", "score", "weight"}
    assert np.isclose(sum(r["weight"] for r in rstep["regions"]), 1.0, atol=1e-4)
    assert [r["label"] for r in rstep["regions"][-len(CONTEXT):]] == list(CONTEXT)   # whole image first


def test_coverage_accumulates_attention(captioner, photo):
    trace = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="greedy"))[0][0]
    last = len(trace.steps) - 1
    assert np.isclose(trace.coverage(last).sum(), len(trace.steps), atol=1e-3)
    assert trace.grid(0).shape == (14, 14)
