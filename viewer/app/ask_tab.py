"""Ask the photo (Up-Down's question answering half): a row under Explore's view, a question answering model
answers in one word and its map shows where the answer was read from. Its layout, handler and wiring."""
from __future__ import annotations

import math
import os
import time

import gradio as gr

from ..paths import ASSETS
from . import session as S
from .controls import MODEL, friendly, style_of

EXAMPLE_QUESTIONS = {   # a few per example photo, of the kinds the answerers were trained on (data/questions.py)
    "coffee.jpg": ["what colour is the cup?", "where is the cup?"],
    "motorcycle.jpg": ["what colour is the motorcycle?", "where is the motorcycle?"],
    "chelsea.jpg": ["what colour is the cat?", "what is the cat looking at?"],
    "astronaut.jpg": ["what colour is the woman's suit?", "what is the woman holding?"],
    "grace_hopper.jpg": ["what colour is the woman's hat?", "what is the woman wearing?"],
    "rocket.jpg": ["where is the rocket?", "how many rockets are there?"]}
LOOK_NOTES = {   # what an answer's map is, by how the model reads the photo (models/vqa.py `look`)
    "attention": "The map: where it read the answer from.",
    "mean": "This model reads every region alike (their mean, no attention): the even map is not a look.",
    "none": "This model reads the question only, never the photo: the even map is not a look, and the answer "
            "is a guess from the question (the baseline the other models must beat).",
}


def layout(c, studio: S.Studio) -> None:
    """The question, the answering model and Ask in one row (hidden with no answering model), then the examples."""
    answerers = studio.models("answer")
    with gr.Row(elem_id="ask-row", equal_height=True, visible=bool(answerers)):
        c.question = gr.Textbox(label="Ask the photo: a question answering model answers in one word and shows where "
                                      "it read the answer from", placeholder="what is the dog catching?",
                                elem_id="question", scale=4)
        c.answer_model = gr.Dropdown(answerers, value=answerers[0] if answerers else None, label="Answered by",
                                     elem_id="answer-model", scale=1, min_width=140)   # no info line: the row stays one line high
        c.ask = gr.Button("Ask", elem_id="ask", scale=0, min_width=80)
    if answerers:   # a click sets the photo and its question (folded away in lecture mode: type there)
        pairs = [(photo, q) for photo, qs in EXAMPLE_QUESTIONS.items() for q in qs]
        gr.Examples([[os.path.join(ASSETS, photo), q] for photo, q in pairs], inputs=[c.photo, c.question],
                    example_labels=[f"{photo.removesuffix('.jpg')}: {q}" for photo, q in pairs],
                    label="Questions to try, with their photo", elem_id="ask-examples", examples_per_page=6)


class AskHandlers:
    """Ask's event (a part of the app's `Handlers`: `self.studio`, and Explore's `_step_reply`, since the answer
    is shown in Explore's view)."""

    @friendly
    def ask_photo(self, path, model_name, question, *style, progress=gr.Progress()):
        """Ask the photo: the answer is a trace like a caption's (one word, then its end), its map the
        one the answer was read from, drawn in the same view; the next answers are its alternatives."""
        if not path:
            raise gr.Error("Choose a photo first: upload, paste, drop, or click an example.")
        if not model_name:
            raise gr.Error("No question answering model is available: see checkpoints/README.md.")
        if not question.strip():
            raise gr.Error("Type a question, e.g. \"what is the dog catching?\"")
        progress(0.1, desc=f"{model_name} is reading the question")
        start = time.perf_counter()
        ex = self.studio.ask(path, model_name, question.strip())
        ex.photo.name = os.path.basename(path)
        step = ex.trace.steps[0]
        others = ", ".join(f"{w} {p:.0%}" for w, p in step.alternatives[1:4])
        note = (f"**{model_name}**: {question.strip()} → **{step.word}** ({math.exp(step.logprob):.0%}; then "
                f"{others}) in {time.perf_counter() - start:.2f} s. {LOOK_NOTES[self.studio.look(model_name)]}{S.size_note(ex.photo)}")
        return (ex, gr.Radio(choices=S.beam_choices(ex), value=ex.beam), note, *self._step_reply(ex, 1, style_of(*style)))


def wire(c, h, decoded) -> None:
    """Ask (the button, or Enter in the question): the answer's trace in Explore's view, then `decoded` (ui._decoded)."""
    for trigger in (c.ask.click, c.question.submit):
        decoded(c, h, trigger(h.ask_photo, [c.photo, c.answer_model, c.question, *c.style],
                              [c.explored, c.beams, c.status, *c.step_outputs], **MODEL, show_progress_on=c.view))
