"""Triage: the runs of `python -m viewer triage` listed, any row opened in Explore (its photo captioned,
or its question ready to ask). Its layout, its handlers and its wiring, top to bottom."""
from __future__ import annotations

import os

import gradio as gr

from . import panels as P
from . import session as S
from .controls import friendly


def layout(c, studio: S.Studio, model: str | None):
    """Triage: open any row of a triage report in Explore; with none, how to make one (`model` in the command)."""
    runs = studio.triage_runs()
    c.triage_note = gr.Markdown(P.triage_note(bool(runs), model))
    with gr.Row():
        c.triage_run = gr.Dropdown(runs, label="Run", elem_id="triage-run")
        c.triage_refresh = gr.Button("Refresh the list", size="sm")
    c.triage_table = gr.Dataframe(headers=P.TRIAGE_COLUMNS, interactive=False, elem_id="triage-table", wrap=True)
    c.triage_rows = gr.State([])


class TriageHandlers:
    """Triage's events (a part of the app's `Handlers`: `self.studio`, `self.models`)."""

    def refresh_triage(self):
        """The triage runs now, and the line above the table to match."""
        runs = self.studio.triage_runs()
        return gr.Dropdown(choices=runs), P.triage_note(bool(runs), self.models[0] if self.models else None)

    @friendly
    def load_triage(self, name):
        if not name:
            return [], None
        rows = self.studio.triage_rows(name)
        return rows, gr.Dataframe(value=P.triage_table(rows), headers=P.TRIAGE_COLUMNS)

    def open_row(self, rows, evt: gr.SelectData):
        row = rows[evt.index[0]] if rows and evt.index is not None else None
        if row is None or not os.path.isfile(row["image"]):
            raise gr.Error("That photo is not on this machine any more.")
        models_now = self.studio.models()
        if row.get("question"):   # an answer's row (triage --questions): the photo captioned, its question ready to ask
            return row["image"], gr.Dropdown(), gr.Tabs(selected="explore"), row["question"], \
                gr.Dropdown(value=row["model"]) if row["model"] in self.studio.models("answer") else gr.Dropdown()
        return row["image"], gr.Dropdown(value=row["model"] if row["model"] in models_now else None), \
            gr.Tabs(selected="explore"), gr.Textbox(), gr.Dropdown()


def wire(c, h, caption_event) -> None:
    """Triage's events; a row opened is captioned in Explore by `caption_event` (ui._caption_event)."""
    c.triage_run.change(h.load_triage, c.triage_run, [c.triage_rows, c.triage_table])
    c.triage_refresh.click(h.refresh_triage, None, [c.triage_run, c.triage_note])
    caption_event(c, h, c.triage_table.select(h.open_row, c.triage_rows,
                                              [c.photo, c.model, c.tabs, c.question, c.answer_model]).success)
