"""Compare: the photo of Explore, 1 to 3 models side by side (or Explore's model by explanation method, or
plain / ruled out / guided), their words in step. Its layout, its handlers and its wiring, top to bottom."""
from __future__ import annotations

from dataclasses import replace

import gradio as gr

from . import panels as P
from . import session as S
from .controls import LIGHT, MODEL, decode_settings, friendly, style_of, view_title
from .page_view import AttentionView

SAME_CAPTION = "Same caption for all"
METHODS_MODE = "Methods: Explore's model and caption, one column per map"
COMPARE_VIEWS = 3   # Compare's views side by side; more traces (Methods mode) are shown a page at a time
MODELS_COMPARED = f"1 to {COMPARE_VIEWS} models"
QUESTION_MODE = "A caption word beside a question's answer"
GUIDANCE_MODE = "Guidance: Explore's model plain, ruling out what the detector does not see, and guided"
COMPARE_STEP_JS = ("(t) => { for (const [id, v] of Object.entries(window.__attentionViews || {}))"
                   " if (id.startsWith('cmp-view-')) v.showWord(Number(t) - 1); return []; }")


def layout(c, studio: S.Studio, models: list[str]):
    """Compare: the same photo, 1 to 3 models (or Explore's model several ways), synchronised words."""
    gr.Markdown(f"Same photo (from Explore), {MODELS_COMPARED}, synchronised words (← → move the word).")
    with gr.Accordion("Models and words", open=False, elem_id="cmp-settings"):   # the views first; settings folded
        with gr.Row():
            c.cmp_models = gr.CheckboxGroup(models, value=models[:COMPARE_VIEWS], label="Models", elem_id="cmp-models",
                                            info=studio.trained_on())
            c.cmp_mode = gr.Radio(["Each model's own caption", SAME_CAPTION, METHODS_MODE, GUIDANCE_MODE]
                                  + ([QUESTION_MODE] if studio.models("answer") else []),
                                  value=SAME_CAPTION, label="Words", elem_id="cmp-mode",
                                  info="Which words the views show: each model's own, one caption for all (so the "
                                       "maps compare), or Explore's caption by method or by guidance.")
            c.cmp_text = gr.Textbox(label="Caption to force (empty: the first model's caption)",
                                    info="Every model is made to say this caption, to see where each looks for its "
                                         "words.", elem_id="cmp-text")
        c.cmp_question = gr.Textbox(label=f"{QUESTION_MODE}: the question (answered by Explore's Answered by), "
                                          "e.g. \"what is running?\" beside the word \"dog\"", elem_id="cmp-question",
                                    visible=bool(studio.models("answer")))
    c.cmp_run = gr.Button("Compare", variant="primary", elem_id="cmp-run")
    with gr.Row():   # each caption above its view
        c.cmp_captions = [gr.Markdown(elem_id=f"cmp-caption-{i}") for i in range(COMPARE_VIEWS)]
    with gr.Row():
        c.cmp_views = [AttentionView(studio.view_photo, elem_id=f"cmp-view-{i}") for i in range(COMPARE_VIEWS)]
    c.cmp_step = gr.Slider(1, 2, value=1, step=1, label="Word", elem_id="cmp-step")
    c.cmp_page = gr.Radio([], label="Views shown", type="index", visible=False, elem_id="cmp-page")
    c.cmp_figure = gr.Button("PNG of the paper's figure: one row per model, one column per word",
                           size="sm", elem_id="cmp-figure")
    c.cmp_download = gr.File(label="Download", elem_id="cmp-download", interactive=False, visible=False)


class CompareHandlers:
    """Compare's events (a part of the app's `Handlers`: `self.studio`, `self.models`)."""

    @friendly
    def compare(self, ex, names, mode, text, question, answer_model, strat, k, temp, sd, mlen, progress=gr.Progress()):
        """Compare's traces, the word slider and the pages of views. Captions are decoded with Explore's
        caption controls: after an Ask, the Exploration holds the answer's 10-token greedy settings."""
        if ex is None:
            raise gr.Error("Caption a photo in Explore first; Compare uses the same photo.")
        # the settings' panel never opened: its controls send nothing, so their first values stand
        names = self.models[:COMPARE_VIEWS] if names is None else names
        mode, text = mode or SAME_CAPTION, text or ""
        ex = replace(ex, settings=decode_settings(strat, k, temp, sd, mlen))
        if mode == QUESTION_MODE:   # Explore's caption, then the answer read from the same photo
            if not answer_model:
                raise gr.Error("No question answering model is available: see checkpoints/README.md.")
            if not (question or "").strip():
                raise gr.Error("Type a question about a word of the caption, e.g. \"what is running?\" for \"dog\".")
            progress(0.1, desc=f"{answer_model} is reading the question")
            caption = ex.trace if not ex.trace.question else \
                self.studio.decode(ex.photo, (names or self.models)[0], ex.settings)[0]   # Explore answered last
            return self._compared([caption, self.studio.ask(ex.photo, answer_model, question.strip()).trace],
                                  len(caption.word_spans))
        if mode == GUIDANCE_MODE:
            if ex.trace.question:
                raise gr.Error("Explore answered a question last: caption the photo there, then Compare.")
            if not ex.settings.searches:
                raise gr.Error("Guidance by the detector works with beam search or greedy: choose one in Explore.")
            progress(0.05, desc=f"{ex.model}: plain, ruled out and guided by the detector")
            return self._compared(self.studio.compare_guidance(ex))
        if mode == METHODS_MODE:
            progress(0.05, desc=f"{ex.model}: every method's maps of its caption")
            return self._compared(self.studio.compare_methods(ex))
        names = list(names or [])
        if not 1 <= len(names) <= COMPARE_VIEWS:
            raise gr.Error(f"Choose {MODELS_COMPARED}.")
        same = None
        if mode == SAME_CAPTION:
            same = self.studio.compare_caption(ex, names, text)
        return self._compared(self.studio.compare(ex.photo, names, ex.settings, same))

    @staticmethod
    def _compared(traces, words: int | None = None):
        """Compare's reply: the traces, the word slider (words, else the longest caption's: models'
        tokens differ) and the pages of views, shown when there are more traces than views."""
        words = words or max(len(tr.word_spans) for tr in traces)
        pages = [f"{i + 1}–{min(i + COMPARE_VIEWS, len(traces))} of {len(traces)}"
                 for i in range(0, len(traces), COMPARE_VIEWS)]
        return traces, gr.Slider(minimum=1, maximum=max(2, words), value=1), \
            gr.Radio(choices=pages, value=pages[0], visible=len(pages) > 1)

    @staticmethod
    def _page(traces, page):
        """The traces on page `page` (0-based) of Compare's views."""
        start = int(page or 0) * COMPARE_VIEWS
        return (traces or [])[start:start + COMPARE_VIEWS]

    @friendly
    def export_figure(self, ex, traces, *style):
        if ex is None or not traces:
            raise gr.Error("Run Compare first (same caption for all gives the paper's soft-vs-hard figure).")
        return gr.File(value=self.studio.export_png(ex, S.figure(ex, traces, style_of(*style)), "figure"), visible=True)

    @friendly
    def compare_views(self, ex, traces, t, page):
        """Compare's views of the traces on page `page` (drawn in the page like Explore's, each at word `t`:
        its first token), and each trace's line."""
        if ex is None or not traces:
            return [None] * COMPARE_VIEWS + [""] * COMPARE_VIEWS
        views = []
        for tr in self._page(traces, page):
            one = S.Exploration(ex.photo, tr.model, ex.settings, [tr], step=self._word_step(tr, t), display=ex.display,
                                display_key=ex.display_key)
            views.append(self.studio.page_view(one, S.Style(), view_title("attention")))
        return views + [None] * (COMPARE_VIEWS - len(views)) + self.compare_lines(traces, t, page)

    @staticmethod
    def _word_step(trace, t) -> int:
        return trace.word_spans[min(int(t), len(trace.word_spans)) - 1].first   # the same word: its first token

    def compare_lines(self, traces, t, page):
        """The caption of each trace on page `page` with word `t` in bold (the page has drawn the views already)."""
        texts = [P.compare_line(tr, self._word_step(tr, t)) for tr in self._page(traces, page)]
        return texts + [""] * (COMPARE_VIEWS - len(texts))


def wire(c, h) -> None:
    """Compare's events: decode, step the views' word (in the page), page through more views, export."""
    c.cmp_run.click(h.compare, [c.explored, c.cmp_models, c.cmp_mode, c.cmp_text, c.cmp_question, c.answer_model,
                                c.strategy, c.beam, c.temperature, c.seed, c.max_len], [c.compared, c.cmp_step, c.cmp_page],
                    **MODEL)
    c.cmp_step.change(None, c.cmp_step, None, js=COMPARE_STEP_JS)
    c.cmp_step.change(h.compare_lines, [c.compared, c.cmp_step, c.cmp_page], c.cmp_captions, show_progress="hidden",
                      **LIGHT)
    for shown in (c.compared.change, c.cmp_page.input):   # new traces, or another page of them
        shown(h.compare_views, [c.explored, c.compared, c.cmp_step, c.cmp_page], [*c.cmp_views, *c.cmp_captions],
              show_progress="hidden", **LIGHT)
    c.cmp_figure.click(h.export_figure, [c.explored, c.compared, *c.style], c.cmp_download)
