"""The view drawn in the page: a `gr.HTML` component whose script (page_view.js, beside this file)
draws a trace's maps on a 2D canvas, as render.py draws them on the server.

The Caption event sends the trace as JSON (`session.view_payload`) in the same reply as the caption:
the photo's name (the page fetches each photo once, as a JPEG data URI, as soon as it is chosen),
every step's map (a grid, or region weights over boxes), the paper's upsampling operator and the
colour tables. Stepping through words, and every change of colour map,
opacity, upsampling or scale, then redraws in the page with no request. render.py stays the
oracle: tests compare the canvas's pixels with its image of the same step; it still draws the
exports, Compare and the steered view.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import gradio as gr

from ..engine.render import COLORMAPS, FULL_WEIGHT, GAMMA, FILL_MAX, colour_table

HERE = os.path.dirname(__file__)


SCRIPT = ("page_view.js",          # the view's state and its element (one script, in this order:
          "page_view_draw.js",     # the drawing kernel, as render.py draws
          "page_view_frames.js",   # each word's frame made ahead, in a worker, and the view drawn from it
          "page_view_panels.js")   # the rest of the word's page, the inverse view, the photos, new traces)


def _read(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


def constants() -> dict:
    """The drawing constants the page shares with render.py: the absolute scale and the colour tables."""
    return {"full_weight": FULL_WEIGHT, "gamma": GAMMA, "fill_max": FILL_MAX,
            "luts": {c: colour_table(c)[:, 0].tolist() for c in (*COLORMAPS, "regions")}}


class AttentionView(gr.HTML):
    """The page's view of a trace: a canvas, the view's title, and the colour bar; its value is a
    `view_payload` dict (None: nothing captioned yet). `photos(key)` gives the photo a payload names
    as a data URI (Studio.view_photo): the page fetches each photo once, with no turn in the queue."""

    def __init__(self, photos: Callable[[str], str | None], value: dict | None = None, **kwargs):
        import json

        def view_photo(key: str) -> str | None:   # (a plain function: Gradio marks it and calls it by its name)
            return photos(key)

        js = "const AV_CONSTANTS = " + json.dumps(constants()) + ";\n" + "".join(_read(f) for f in SCRIPT)
        super().__init__(value=value, html_template=_read("page_view.html"), css_template=_read("page_view.css"),
                         js_on_load=js, server_functions=[view_photo], **kwargs)
