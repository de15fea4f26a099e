"""Small app items: what the models have read, Triage's empty state, Compare's line without <end>."""
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest

from viewer.app import panels as P
from viewer.app import session as S
from viewer.app import triage_tab, ui
from viewer.engine.trace import AttentionTrace, TraceStep


@pytest.fixture
def studio(tmp_path):
    """A Studio over the shipped checkpoints that runs no model (their metadata is all it reads)."""
    st = S.Studio(SimpleNamespace(checkpoint_dir=None))
    st.triage_dir = str(tmp_path / "triage")   # no runs yet
    yield st
    st.close()


def test_model_picker_says_what_the_models_have_read(studio):
    with gr.Blocks():
        c = SimpleNamespace()
        ui._explore_inputs(c, studio.models(), studio.trained_on())
    assert "Flickr8k" in c.model.info and "people and dogs" in c.model.info
    assert c.beam.info and c.temperature.info and c.mention.info and c.guides.info


def test_trained_on_line_names_other_data_from_the_metadata():
    assert S.trained_on_line({"sat-soft": "flickr8k", "mine": None}) == S.FLICKR8K_LINE
    line = S.trained_on_line({"sat-soft": "flickr8k", "mine": "coco"})
    assert "coco (mine)" in line and "flickr8k (sat-soft)" in line


def test_empty_triage_says_how_to_fill_it_and_has_headers(studio):
    with gr.Blocks():
        c = SimpleNamespace()
        triage_tab.layout(c, studio, "sat-soft")
    assert "python -m viewer triage --model sat-soft --data ../shared/data/flickr8k" in c.triage_note.value
    assert "No triage runs yet" in c.triage_note.value and studio.triage_dir not in c.triage_note.value
    assert c.triage_table.headers == P.TRIAGE_COLUMNS


def test_compare_line_leaves_out_end():
    att = np.full(196, 1 / 196, np.float32)
    trace = AttentionTrace("sat-soft", "grid", [TraceStep(w, -1, -0.5, att, []) for w in ("a", "dog", "<end>")],
                           640, 480)
    for step in range(3):
        assert "<end>" not in P.compare_line(trace, step)
    assert P.compare_line(trace, 1).endswith("a **[dog]**") and len(trace.steps) == 3
