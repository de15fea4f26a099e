"""Compare and the caption line through the app's own handlers (issue "One screen, nothing broken"): every
reply fits the components its event writes to, Compare decodes with Explore's caption settings, the
caption shows no "<end>", and a photo too small (or far too large) for the model is said in the status."""
from __future__ import annotations

import os

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from viewer.app import session as S
from viewer.app import compare_tab, ui
from viewer.engine.images import Photo
from viewer.engine.pipeline import ANSWER_TOKENS, Captioner

from conftest import ASSETS, ROOT

PHOTO = os.path.join(ASSETS, "coffee.jpg")
EXPLORE = ("Beam search", 3, 1.0, 0, 20)   # Explore's decoding controls: strategy, beam, temperature, seed, words
STYLE = S.Style().inputs()
OWN = "Each model's own caption"


@pytest.fixture(scope="module")
def app(captioner):
    """The built page and the Handlers its events call (tiny models)."""
    studio = S.Studio(captioner)
    demo = ui.build(studio)
    yield demo, _event(demo, "compare").fn.__self__
    studio.close()


@pytest.fixture(scope="module")
def shipped():
    """The Handlers on the shipped models, whose captions are longer than an answer's 10 tokens."""
    studio = S.Studio(Captioner("cpu", checkpoint_dir=os.path.join(ROOT, "checkpoints")))
    yield ui.Handlers(studio, studio.models())
    studio.close()


def _event(demo, name: str):
    """The event of the page that runs handler `name`."""
    return next(f for f in demo.fns.values() if f.name == name)


def _fits(outputs, reply) -> None:
    """Each value of a reply is what its component takes, as Gradio checks after the event: an update
    of that component, a skip, or a value its postprocess accepts."""
    assert len(reply) == len(outputs)
    for component, value in zip(outputs, reply):
        if isinstance(value, gr.components.Component):
            assert type(value) is type(component)
        elif value != gr.skip():
            component.postprocess(value)


def test_methods_mode_shows_every_method_in_the_views_there_are(app):
    demo, h = app
    ex = h.caption_photo(PHOTO, "sat-soft", *EXPLORE, "", [], *STYLE)[0]
    compare, views = _event(demo, "compare"), _event(demo, "compare_views")
    reply = h.compare(ex, ["sat-soft"], compare_tab.METHODS_MODE, "", "", "vqa-regions", *EXPLORE)
    _fits(compare.outputs, reply)
    traces, pages = reply[0], reply[2]
    methods = h.studio.methods("sat-soft")
    assert len(traces) == len(methods) > compare_tab.COMPARE_VIEWS and pages.visible
    lines = []
    for page in range(len(pages.choices)):
        out = h.compare_views(ex, traces, 2, page)
        _fits(views.outputs, out)
        lines += [line for line in out[compare_tab.COMPARE_VIEWS:] if line]
        _fits(_event(demo, "compare_lines").outputs, h.compare_lines(traces, 2, page))
    assert [line.split("**")[1] for line in lines] == [t.model for t in traces]   # every method, once


def test_compare_after_ask_captions_with_explores_settings(shipped):
    """An Ask leaves its 10-token greedy settings on the Exploration: Compare never decodes with them
    (the shipped sat-hard's beam caption of the cup is 13 words)."""
    h = shipped
    explored = h.caption_photo(PHOTO, "sat-hard", *EXPLORE, "", [], *STYLE)[0]
    assert len(explored.trace.steps) > ANSWER_TOKENS
    asked = h.ask_photo(PHOTO, "vqa-regions", "what colour is the cup?", *STYLE)[0]
    updown = h.caption_photo(PHOTO, "updown", *EXPLORE, "", [], *STYLE)[0]
    own = h.compare(asked, ["sat-hard", "updown"], OWN, "", "", "vqa-regions", *EXPLORE)[0]
    assert [t.caption for t in own] == [explored.trace.caption, updown.trace.caption]
    same = h.compare(asked, ["sat-hard", "updown"], "Same caption for all", "", "", "vqa-regions", *EXPLORE)[0]
    assert [t.caption for t in same] == [explored.trace.caption] * 2


def test_the_caption_shows_no_end_word(app):
    _, h = app
    reply = h.caption_photo(PHOTO, "sat-soft", *EXPLORE, "", [], *STYLE)
    ex, tokens = reply[0], reply[-1]
    assert ex.trace.steps[-1].word == "<end>"                       # the trace keeps its last step
    assert [w.strip() for w, _ in tokens] == ex.trace.words
    answer = h.ask_photo(PHOTO, "vqa-regions", "what colour is the cup?", *STYLE)
    assert [w.strip() for w, _ in answer[-1]] == answer[0].trace.words


def test_compare_says_one_range_of_models(app):
    demo, h = app
    header = next(b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown) and "synchronised" in (b.value or ""))
    assert f"1 to {compare_tab.COMPARE_VIEWS} models" in header
    ex = h.caption_photo(PHOTO, "sat-soft", *EXPLORE, "", [], *STYLE)[0]
    with pytest.raises(gr.Error, match=f"Choose 1 to {compare_tab.COMPARE_VIEWS} models"):
        h.compare(ex, [], OWN, "", "", "vqa-regions", *EXPLORE)
    assert len(h.compare(ex, ["sat-soft"], OWN, "", "", "vqa-regions", *EXPLORE)[0]) == 1


def test_a_photo_too_small_for_the_model_is_said(app, tmp_path):
    _, h = app
    small = str(tmp_path / "tiny.png")
    Image.new("RGB", (8, 8), (200, 40, 40)).save(small)
    note = h.caption_photo(small, "sat-soft", *EXPLORE, "", [], *STYLE)[2]
    assert "8×8" in note and note.count("\n") == 0
    assert "px" not in h.caption_photo(PHOTO, "sat-soft", *EXPLORE, "", [], *STYLE)[2]
    huge = Photo(np.zeros((4, 6, 3), np.uint8), 9000, 6000)
    assert "9000×6000" in S.size_note(huge) and S.size_note(Photo(np.zeros((4, 4, 3), np.uint8), 640, 480)) == ""


def test_an_object_the_detector_does_not_find_is_red_with_its_why(shipped):
    """The shipped sat-soft calls the cup's photo "a small child is playing with a toy": the detector
    finds no person there, so "child" is marked in the caption itself, and the view carries why."""
    h = shipped
    ex = h.caption_photo(PHOTO, "sat-soft", *EXPLORE, "", [], *STYLE)[0]
    ex.sent_view = None                                               # (Caption sent it to the page already)
    payload = h.studio.page_view(ex, S.Style(), ui.view_title("attention"))
    words = [w.text for w in ex.trace.word_spans]
    child = words.index("child")
    assert payload["unseen"][str(child)].startswith("child: the detector finds no person here; ")
    assert list(payload["unseen"]) == [str(child)]                     # the one object word it names
    assert payload["unseen"][str(child)].endswith("looked at a cup, said child: a naming failure")
    labels = dict((token.strip(), label) for token, label in S.caption_tokens(ex))
    assert labels["child"] == "not seen" and labels["small"] is None
    assert payload["words"] == words and payload["word_firsts"] == [w.first for w in ex.trace.word_spans]
