"""The Gradio app: layout and thin wiring; everything it shows comes from app/session.py.

`Handlers` holds what each event does (one method per event, calling the Studio); `build` lays
the page out and wires events to them. A tab with a module of its own (ask_tab.py, compare_tab.py, triage_tab.py:
its layout, handlers and wiring) joins with one line in each: `Handlers`' bases, `build`'s tabs and wiring.
Stepping: the page swaps in the preloaded view of the new word itself (viewer.js) and the word slider, the
one record of the word, tells the server. Nothing here runs a model except Caption, Branch and Compare, and
those go through the Studio's decode cache.
"""
from __future__ import annotations

import functools
import os
import time
from types import SimpleNamespace

import gradio as gr

from ..analysis.explain import METHOD_LABELS
from ..analysis.guide import user_words
from ..engine.checkpoints import CheckpointError
from ..engine.images import ImageError
from ..paths import ASSETS
from ..engine.render import COLORMAPS, SCALES, UPSAMPLING
from . import ask_tab, compare_tab, triage_tab
from .ask_tab import AskHandlers
from .compare_tab import CompareHandlers
from .controls import LIGHT, MODEL, decode_settings, friendly, style_of, view_title
from .keys import MODEL_KEYS
from .triage_tab import TriageHandlers
from . import panels as P
from .links import link_query, read_link
from . import session as S
from .page_view import AttentionView

HIDDEN = ["lecture-hide"]   # folded away in lecture mode
# Guidance by the detector (analysis/guide.py), two switches measured apart on dev-report (README, "Naming
# what is there"); GUIDES_BY_DEFAULT: those the dev figures support (see there).
RULE_OUT = "Never name what it does not see (nor <unk>)"
NAME_DETECTED = "Must name its top classes"
GUIDES_BY_DEFAULT: list[str] = []
STEER, HIDE = "Steer: make the selected word look there", "Hide that place from the model"


class PhotoInput(gr.Image):
    """gr.Image that hands the uploaded file to OUR loader untouched (Gradio's own PIL open would
    fail on corrupt files with an unreadable error before our checks run)."""

    @classmethod
    def get_block_name(cls) -> str:
        return "image"

    def preprocess(self, payload):
        if payload is None or (payload.url and payload.url.startswith("data:")):
            return super().preprocess(payload)
        return str(payload.path)


STYLE_SCALE = 3   # where `scale` is in the style inputs (c.style)
class Handlers(AskHandlers, CompareHandlers, TriageHandlers):
    """Every event handler of the app, one method each: what a click, key or slider does, calling the
    Studio (session.py) for the work. `build` only lays the page out and wires these up."""

    def __init__(self, studio: S.Studio, models: list[str]):
        self.studio, self.models = studio, models

    @friendly
    def caption_photo(self, path, model_name, strat, k, temp, sd, mlen, mention, guides, *style,
                      progress=gr.Progress()):
        if not path:
            raise gr.Error("Choose a photo first: upload, paste, drop, or click an example.")
        if not model_name:
            raise gr.Error("No model is available: see checkpoints/README.md.")
        progress(0.1, desc=f"{model_name} is looking at the photo")
        start = time.perf_counter()
        settings = decode_settings(strat, k, temp, sd, mlen)
        required = tuple((tuple(words), source) for words, source in user_words(mention)) if mention.strip() else None
        if required and not settings.searches:
            raise gr.Error("Must mention works with beam search or greedy decoding.")
        guided_asked = bool(guides)
        guides = set(guides or ()) if settings.searches else set()
        ex = self.studio.explore(path, model_name, settings, required, name_detected=NAME_DETECTED in guides,
                                 rule_out=RULE_OUT in guides)
        ex.photo.name = os.path.basename(path)
        took = time.perf_counter() - start
        note = f"**{model_name}**: {len(ex.beams)} caption(s) in {took:.2f} s. Click a word, or use ← →." \
            + S.size_note(ex.photo)
        if guides:
            note += " " + S.guidance_note(ex.required, ex.avoid, ex.trace.guidance)
        elif guided_asked:
            note += " (Guided by the detector applies to beam search and greedy.)"
        # the trace goes to the page with the caption, which draws every word's views itself
        return (ex, gr.Radio(choices=S.beam_choices(ex), value=ex.beam), note, *self._step_reply(ex, 1, style_of(*style)))

    @friendly
    def open_link(self, request: gr.Request):
        """A deep link (app/links.py): its example photo and model chosen, its word kept for when the caption
        comes (the page then clicks Caption, as a person would); nothing changes without one. (Gradio
        hands over `request` only as a plain parameter.)"""
        link = read_link(dict(request.query_params), self.models)
        return (gr.skip(),) * 3 if link is None else (link.photo, link.model, link.word)

    def link_word(self, ex, word):
        """After a linked photo's caption: go to the link's word, once."""
        if ex is None or word is None:
            return gr.skip(), None
        ex.go_to(word)
        return gr.Slider(value=ex.step + 1), None

    def prepare_photo(self, path, model_name):
        """A photo chosen, or another model: open the photo and compute what the model reads from it
        while the person reaches for Caption, and name it for the page to fetch (PHOTO_JS). A file
        that cannot be read is said once, by Caption."""
        if not path:
            return gr.skip()
        try:
            return self.studio.prepare(path, model_name)
        except (ImageError, CheckpointError, ValueError, OSError):
            return gr.skip()

    def _trace_views(self, ex):
        return (gr.Slider(minimum=1, maximum=max(2, ex.n_steps), value=ex.step + 1, step=1),
                gr.Radio(choices=S.beam_choices(ex), value=ex.beam))

    @friendly
    def show_trace(self, ex, t, *style):
        """A new trace (a branch, back, reset, another beam) to the page at word t: the page then
        steps through it, draws its panels and restyles it alone."""
        if ex is None:
            return gr.Slider(), None, None
        return self._step_reply(ex, t, style_of(*style))

    def _view(self, ex, st):
        """The page view's new payload, or no update when the page holds this trace, map and head.
        Beside the maps it carries what the page shows for each word: the step panel, and the next
        words to branch with."""
        payload = self.studio.page_view(ex, st, view_title(ex.method))
        if payload is None:
            return gr.skip()
        payload["panels"] = [P.step_panel(ex, t) for t in range(ex.n_steps)]
        payload["alternatives"] = [[w for w, _ in s.alternatives] for s in ex.trace.steps]
        return payload

    def _step_reply(self, ex, t, st):
        ex.go_to(t)
        return (gr.Slider(minimum=1, maximum=max(2, ex.n_steps), value=ex.step + 1, step=1),
                self._view(ex, st), S.caption_tokens(ex))

    @friendly
    def after_decode(self, ex, *style):
        """After a new trace: the view's payload if it changed (a new caption shows attention until
        it is explained), the head picker's entries and the methods offered."""
        if ex is None:
            return gr.Dropdown(), gr.Radio(), gr.skip()
        if (ex.method, ex.tokens) not in ex.explained:
            ex.method = "attention"
        st = style_of(*style)
        choices = S.head_choices(ex.trace)
        methods = [METHOD_LABELS[m] for m in self.studio.methods(ex.model)]
        return gr.Dropdown(choices=choices, value=st.head if st.head in choices else S.MEAN_HEADS), \
            gr.Radio(choices=methods, value=METHOD_LABELS[ex.method]), self._view(ex, st)

    @friendly
    def explain_with(self, ex, label, t, *style, progress=gr.Progress()):
        """Show another map for every word: computed once for the whole caption (occlusion runs the
        pipeline on dozens of blurred copies of the photo), then the page draws it like attention
        (its coverage and word strip too). Explanations are drawn
        stretched (their mass is spread wider than attention's, so on the absolute scale they look
        faint), attention on the absolute scale; Scale changes either."""
        if ex is None:
            raise gr.Error("Caption a photo first.")
        method = next(m for m, text in METHOD_LABELS.items() if text == label)
        if method != "attention":
            progress(0.05, desc=f"{label}: every word of the caption")
            self.studio.explain(ex, method)
        ex.method = method
        style = list(style)
        style[STYLE_SCALE] = "absolute" if method == "attention" else "stretch"
        return (*self._step_reply(ex, t, style_of(*style)), gr.Radio(value=style[STYLE_SCALE]))

    @friendly
    def seen_words(self, ex):
        """The caption again, its words coloured by how much they depend on the photo (measured last:
        one more run of the pipeline, after everything stepping needs)."""
        if ex is None or self.studio.guessed(ex) is None:
            return gr.HighlightedText()
        return S.caption_tokens(ex)

    @friendly
    def show_heads(self, ex, t):
        """Every head's maps for the page to draw (`heads_payload`): the grid, and each head's weight
        where the pointer rests on the photo, are drawn there."""
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex.go_to(t)
        heads = S.heads_payload(ex)
        if heads is None:
            raise gr.Error(f"{ex.model} has one attention map per word, not heads.")
        return heads

    @friendly
    def pick_head(self, ex, *style):
        """Another head's maps (or their mean) for the page to draw: the one restyle the server hears of."""
        return gr.skip() if ex is None else self._view(ex, style_of(*style))

    @friendly
    def pick_model(self, key):
        return gr.Dropdown(value=S.model_for_key(self.models, key))

    @friendly
    def branch(self, ex, t, word, *style):
        if ex is None or not word:
            raise gr.Error("Pick one of the next words first.")
        ex = self.studio.branch(ex, int(t) - 1, word)
        return (ex, *self._trace_views(ex))

    @friendly
    def undo(self, how, ex, *style):
        """Back one branch or reset to the model's own caption."""
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex = self.studio.unbranch(ex) if how == "back" else self.studio.reset(ex)
        return (ex, *self._trace_views(ex))

    @friendly
    def choose_beam(self, ex, index, *style):
        if ex is None or index is None:
            return ex, gr.Slider()
        ex.choose_beam(index)
        return ex, gr.Slider(maximum=max(2, ex.n_steps), value=1)

    @friendly
    def export(self, kind, ex, t, *style):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex.go_to(t)
        st = style_of(*style)
        if kind == "json":
            path = self.studio.export_json(ex)
        elif kind == "gif":
            path = self.studio.export_gif(ex, st)
        else:
            draw = {"strip": S.strip, "heads": S.all_heads, "view": S.overlay}[kind]
            path = self.studio.export_png(ex, draw(ex, st), kind)
        return gr.File(value=path, visible=True)

    @friendly
    def score(self, ex, text):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        refs = [line.strip() for line in (text or "").splitlines() if line.strip()]
        result = self.studio.score(ex, refs)
        return P.score_html(ex.trace.caption, result, corpus="CIDEr" in result)

    @friendly
    def diagnose(self, ex, t):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex.go_to(t)   # the word the page shows (its deletion curve)
        return P.diagnosis(self.studio, ex)

    @friendly
    def trust(self, ex, t, *style, progress=gr.Progress()):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex.go_to(t)
        return P.trust_card(self.studio, ex, style_of(*style), lambda done, total, what: progress(done / total, desc=what))

    @friendly
    def hide(self, ex, t):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex.go_to(t)
        return P.occlusion(self.studio, ex)

    @friendly
    def click_photo(self, ex, t, mode, upsampling_, colormap_, opacity_, scale_, show_alpha_, hard_samples_, head_,
                    evt: gr.SelectData):
        """Steer the selected word's attention to the clicked place, or hide that place."""
        style = (upsampling_, colormap_, opacity_, scale_, show_alpha_, hard_samples_, head_)
        if ex is None:
            raise gr.Error("Caption a photo first.")
        ex.go_to(t)
        if evt is None or evt.index is None:
            return gr.HTML(), gr.Image()
        x, y = evt.index[:2]
        if mode == HIDE:
            return P.occlusion(self.studio, ex, [S.unit_at(ex, float(x), float(y))]), gr.Image(visible=False)
        page, result = P.steering(self.studio, ex, float(x), float(y))
        one = S.Exploration(ex.photo, ex.model, ex.settings, [result.trace], display=ex.display)
        return page, gr.Image(value=self.studio.view(one, style_of(*style), result.step), visible=True)

def build(studio: S.Studio, lecture: bool = False) -> gr.Blocks:
    """The app; `lecture`: start in lecture mode (big type, full-screen view, keys; see viewer.js).
    The components go into one namespace `c`, laid out tab by tab, then wired to `Handlers`."""
    os.makedirs(studio.view_dir, exist_ok=True)
    gr.set_static_paths([studio.view_dir])   # the server's views (coverage, Compare) are served as they are
    models = studio.models()   # the listing order (engine/checkpoints.py shipped): sat-soft first
    h, c = Handlers(studio, models), SimpleNamespace()
    # uploads and served images in Gradio's cache are deleted an hour after they were made
    with gr.Blocks(title="Attention viewer", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        c.explored = gr.State(None, time_to_live=3600)
        c.compared = gr.State(None, time_to_live=3600)
        gr.Markdown("## Attention viewer: watch a captioning model look, word by word", elem_id="title")
        with gr.Tabs(elem_id="tabs") as c.tabs:
            with gr.Tab("Explore", id="explore"):
                with gr.Row():
                    with gr.Column(scale=1, min_width=320, elem_id="inputs"):
                        _explore_inputs(c, models, studio.trained_on())
                    with gr.Column(scale=3, elem_id="stage"):
                        _explore_stage(c, studio, models, lecture)
                        _explore_panels(c)
            with gr.Tab("Compare", id="compare"):
                compare_tab.layout(c, studio, models)
            with gr.Tab("Triage", id="triage"):
                triage_tab.layout(c, studio, models[0] if models else None)
        c.style = [c.upsampling, c.colormap, c.opacity, c.scale, c.show_alpha, c.hard_samples, c.head]
        c.step_outputs = [c.step, c.view, c.caption]   # a new trace, or the server moved the word
        _wire_explore(c, h)
        _drawn(c, h)
        _wire_branching(c, h)
        _wire_tools(c, h, studio)
        compare_tab.wire(c, h)
        triage_tab.wire(c, h, _caption_event)
        _wire_link(c, h, demo)
    return demo


def _explore_inputs(c, models: list[str], trained_on: str):
    """Explore, left column: the photo, the model (`trained_on`: what the models have read), decoding and
    overlay settings."""
    examples = [os.path.join(ASSETS, n) for n in sorted(os.listdir(ASSETS)) if n.endswith(".jpg")]
    c.photo = PhotoInput(label="Photo: upload, paste or drop", type="filepath", elem_id="photo",
                       sources=["upload", "clipboard"], height=260)
    c.model = gr.Dropdown(models, value=models[0] if models else None, label="Model",
                        info=trained_on, elem_id="model")
    c.run = gr.Button("Caption", variant="primary", elem_id="run")
    c.status = gr.Markdown(elem_id="status")
    gr.Examples(examples, inputs=c.photo, label="Examples")
    with gr.Accordion("Decoding", open=False, elem_classes=HIDDEN):
        c.strategy = gr.Radio(list(S.STRATEGY_LABELS), value="Beam search", label="Strategy",
                            info="Beam search keeps the best few captions as it goes; greedy takes the likeliest "
                                 "word each time; sampling draws words at random.", elem_id="strategy")
        c.beam = gr.Slider(1, 8, value=3, step=1, label="Beam size",
                            info="How many captions beam search keeps in play at each word (1: greedy).")
        c.temperature = gr.Slider(0.1, 2.0, value=1.0, step=0.1, label="Temperature (sampling)",
                                   info="Below 1 sampling picks likely words; above 1, surprising ones.")
        c.seed = gr.Number(0, precision=0, label="Seed (sampling, hard attention)",
                           info="The same seed draws the same random choices again.")
        c.max_len = gr.Slider(3, 30, value=20, step=1, label="Max words",
                              info="A caption ends at its end word, or here (counted in the model's tokens).")
    c.mention = gr.Textbox(label="Must mention (beam search that includes these words: comma-separated, "
                                 "'a|b' for either)", placeholder="bear, kite", elem_id="mention",
                         info="The caption is made to contain these words, even if the model would not say them.")
    c.guides = gr.CheckboxGroup([RULE_OUT, NAME_DETECTED], value=GUIDES_BY_DEFAULT,
                                label="Guided by what the detector sees (beam search and greedy)", elem_id="guides",
                                info="An object detector looks at the photo first; these switches keep the caption "
                                     "to the objects it found.")
    with gr.Accordion("Overlay", open=True, elem_classes=HIDDEN):
        c.upsampling = gr.Radio(list(UPSAMPLING), value="smooth", label="Upsampling",
                              info="How the coarse map is stretched over the photo: smoothly or as blocks.",
                              elem_id="upsampling")
        c.colormap = gr.Dropdown(list(COLORMAPS), value="paper", label="Colours (paper: the "
                               "figures of Show, Attend and Tell)", elem_id="colormap",
                               info="paper darkens where the model did not look; the others colour where it did.")
        c.opacity = gr.Slider(0.0, 1.0, value=0.8, step=0.05, label="Opacity", elem_id="opacity",
                              info="How strongly the map covers the photo.")
        c.scale = gr.Radio(list(SCALES), value="absolute", elem_id="scale",
                         label="Scale: absolute (same brightness, same weight, on every word and "
                               "model) or stretch (each map to its own range)",
                         info="Absolute lets you compare maps; stretch shows the shape of a faint one.")
        c.show_alpha = gr.Checkbox(True, label="Hard attention: show alpha under the sampled cell",
                                   info="A hard-attention model looks at one cell, drawn from its map (alpha).")
        c.hard_samples = gr.Slider(1, 20, value=1, step=1, label="Hard attention: cells drawn",
                                    info="How many cells to draw from the map, to show where it might look.")
        c.head = gr.Dropdown([S.MEAN_HEADS], value=S.MEAN_HEADS, elem_id="head",
                           label="Transformer: which cross-attention map",
                           info="A Transformer looks at the photo with several heads in each layer; pick one, "
                                "or their mean.")


def _explore_stage(c, studio: S.Studio, models: list[str], lecture: bool):
    """Explore, the stage: caption, view, stepping and playing, lecture mode, clicking the photo."""
    c.lecture_line = gr.HTML(P.lecture_line(models[0] if models else None),
                           elem_id="lecture-line")
    c.caption = gr.HighlightedText(label="Caption (click a word): red, an object the detector misses; grey, guessed",
                                   elem_id="caption",
                                   combine_adjacent=False, show_legend=False, show_inline_category=False,
                                   interactive=False, color_map={"branched": "#93c5fd", "required": "#fde68a",
                                                                 "guessed": "#e2e8f0", "said, not seen": "#fca5a5",
                                                                 "not seen": "#fca5a5"})
    c.view = AttentionView(studio.view_photo, elem_id="view")   # drawn in the page (page_view.js) from the trace
    c.photo_key = gr.Textbox(visible=False)   # the chosen photo's name for the page (prepare_photo, PHOTO_JS)
    with gr.Row(elem_id="controls"):   # under the view; the buttons keep their height (the row: the slider's)
        c.prev_btn = gr.Button("◀ Previous", elem_id="prev", size="sm")
        c.play_btn = gr.Button("▶ Play", elem_id="play", size="sm")
        c.next_btn = gr.Button("Next ▶", elem_id="next", size="sm")
        c.speed = gr.Slider(0.4, 3.0, value=0.9, step=0.1, label="Play: seconds per word",   # read by viewer.js
                          elem_id="speed", scale=2, interactive=True)
        gr.Checkbox(lecture, label="Lecture mode", elem_id="lecture",   # toggled by viewer.js
                    interactive=True, scale=1, min_width=140)
    with gr.Row(elem_classes=["model-keys"]):   # clicked by the number keys (viewer.js)
        c.model_keys = [gr.Button(f"Model {i}", elem_id=f"model-{i}") for i in MODEL_KEYS]
    c.step = gr.Slider(1, 2, value=1, step=1, label="Word", elem_id="step")
    with gr.Row(elem_id="link-row", equal_height=True):   # a deep link (app/links.py), made in the page (LINK_JS)
        c.link_btn = gr.Button("Copy a link to this word", elem_id="link-btn", size="sm", scale=0, min_width=220)
        c.link = gr.Textbox(show_label=False, interactive=False, elem_id="link", scale=4, container=False,
                            placeholder="a link opens the app on this example photo, model and word")
        c.link_query = gr.Textbox(visible=False)   # "?photo=...&model=..." of an example photo's caption, else ""
        c.link_word = gr.State(None)   # an opened link's word, until its caption comes
    ask_tab.layout(c, studio)
    c.explain_with = gr.Radio([METHOD_LABELS["attention"]], value=METHOD_LABELS["attention"], elem_id="explain-with",
                              label="Explain with: where the model looked (attention), or what the word used "
                                    "(maps computed for the whole caption)", elem_classes=HIDDEN,
                              info="Attention is where the model looked; the others hide parts of the photo to "
                                   "find what the word needed.")
    c.click_mode = gr.Radio([STEER, HIDE], value=STEER, label="Clicking the photo", elem_id="click-mode",
                          elem_classes=HIDDEN, info="Steer: the model is made to look where you click at this word; "
                                                    "hide: that place is hidden from it. Either way, see what it says.")
    with gr.Row(elem_classes=HIDDEN):
        c.clicked = gr.HTML(elem_id="clicked")
        c.steered_view = gr.Image(label="Where you steered it", height=220, interactive=False,
                                elem_id="steered-view", visible=False)


def _explore_panels(c):
    """Explore, under the view: the word's panel, branching, beams, Diagnose, heads, numbers, exports."""
    # the page fills these from the trace as the word changes (page_view.js): no request per word
    with gr.Row(elem_classes=HIDDEN):
        c.panel = gr.HTML('<div class="av-panel"></div>', elem_id="panel")
        c.coverage = gr.HTML('<div class="av-caption">Coverage: attention summed so far</div>'
                             '<canvas class="av-coverage" width="4" height="3"></canvas>', elem_id="coverage")
    with gr.Accordion("Branch: choose another word here and let the model go on", open=False,
                      elem_classes=HIDDEN):
        gr.HTML('<div class="av-caption">Next word</div><div class="av-next-words"></div>', elem_id="alternatives")
        c.alternative = gr.Textbox(elem_id="alternative", elem_classes=["av-hidden"], show_label=False)   # the word chosen
        with gr.Row():
            c.branch_btn = gr.Button("Continue with this word", elem_id="branch")
            c.back_btn = gr.Button("Back", elem_id="back")
            c.reset_btn = gr.Button("Reset", elem_id="reset")
    c.beams = gr.Radio([], label="Beams (best first)", elem_id="beams", type="index", elem_classes=HIDDEN,
                       info="Beam search's other finished captions; choose one to explore it.")
    with gr.Accordion("Diagnose: grounding, attention sanity, occlusion, which map to trust", open=False,
                      elem_classes=HIDDEN):
        gr.Markdown("Hide where the selected word looked (or choose 'Hide' above and click the "
                    "photo), and see how the caption changes.")
        with gr.Row():
            c.diagnose_btn = gr.Button("Check this caption", elem_id="diagnose")
            c.trust_btn = gr.Button("Which map to trust for this word", elem_id="trust-btn")
            c.occlude_btn = gr.Button("Hide where this word looked", elem_id="occlude")
        c.diagnosis = gr.HTML(elem_id="diagnosis")
        c.trust = gr.HTML(elem_id="trust")
        c.occluded = gr.HTML(elem_id="occluded")
        c.references = gr.Textbox(label="References, one per line (filled in for photos of "
                                      "the dataset given with --data)", lines=3,
                                elem_id="references")
        c.score_btn = gr.Button("Score the caption against them", elem_id="score")
        c.scores = gr.HTML(elem_id="scores")
    with gr.Accordion("All heads of this word (Transformer): layers as rows, heads as columns",
                      open=False, elem_classes=HIDDEN):
        with gr.Row():
            c.heads_btn = gr.Button("Show every layer and head for the selected word", size="sm",
                                  elem_id="heads-show")
            c.png_heads = gr.Button("PNG of all heads", size="sm", elem_id="export-heads")
        gr.HTML('<div class="av-heads"></div>', elem_id="heads")   # drawn by the page from c.heads
        c.heads = gr.JSON(visible=False)
    with gr.Accordion("Raw attention numbers", open=False, elem_classes=HIDDEN):
        gr.HTML('<div class="av-numbers"></div>', elem_id="numbers")
    gr.Markdown("**Every word with its attention** (the paper's figure; click one to show it)", elem_classes=HIDDEN)
    gr.HTML('<div class="av-strip"></div>', elem_id="strip", elem_classes=HIDDEN)
    with gr.Row(elem_classes=HIDDEN):
        c.png_view = gr.Button("PNG of this view", size="sm", elem_id="export-view")
        c.png_strip = gr.Button("PNG of the word strip", size="sm", elem_id="export-strip")
        c.gif = gr.Button("Animated GIF", size="sm", elem_id="export-gif")
        c.json_btn = gr.Button("JSON trace", size="sm", elem_id="export-json")
    c.download = gr.File(label="Download", elem_id="download", interactive=False, visible=False,
                       elem_classes=HIDDEN)


def _caption_event(c, h: Handlers, trigger):
    """Caption the photo after `trigger`, then draw every word's views and the word strip. The
    progress overlay goes on the view alone: drawn over every output, its timers cost a 2-core
    machine's browser more than the caption itself."""
    decode_inputs = [c.photo, c.model, c.strategy, c.beam, c.temperature, c.seed, c.max_len, c.mention, c.guides, *c.style]
    captioned = trigger(h.caption_photo, decode_inputs, [c.explored, c.beams, c.status, *c.step_outputs],
                        **MODEL, show_progress_on=c.view)
    _decoded(c, h, captioned)
    captioned.success(lambda ex: P.lecture_line(ex.model if ex else None), c.explored, c.lecture_line,
                      show_progress="hidden")
    captioned.success(link_query, [c.photo, c.model], c.link_query, show_progress="hidden")
    captioned.success(h.link_word, [c.explored, c.link_word], [c.step, c.link_word], show_progress="hidden")


def _wire_link(c, h: Handlers, demo):
    """A deep link in the page's address (app/links.py): its photo and model chosen, then Caption clicked in
    the page (the view draws a caption only once it is on the page), then its word (`_caption_event`)."""
    demo.load(h.open_link, None, [c.photo, c.model, c.link_word], show_progress="hidden").success(
        None, None, None, js=LINK_OPEN_JS)


def _decoded(c, h: Handlers, event):
    """After anything that brings a new trace: the head picker, coverage, methods and (if changed) the view."""
    return event.success(h.after_decode, [c.explored, *c.style], [c.head, c.explain_with, c.view],
                         show_progress="hidden", **LIGHT)


def _drawn(c, h: Handlers):
    """Once the page has made every word's frame of a new trace (the view's `load`): which words it
    saw (a run of the pipeline). Started after them, so it does not compete with the first overlay
    and the first steps for a small machine's cores."""
    c.view.load(h.seen_words, c.explored, c.caption, show_progress="hidden", **MODEL)


STEP_JS = "(t) => { window.__viewerMain?.show(Number(t) - 1); return []; }"
PHOTO_JS = "(key) => { window.__viewerPrefetch?.(key); return []; }"
LINK_JS = ("(query, t) => { if (!query) return 'Links name an example photo: this photo was uploaded, so it has none.';"
           " const url = location.origin + location.pathname + query + '&word=' + t;"
           " navigator.clipboard?.writeText(url).catch(() => {}); return url; }")
LINK_OPEN_JS = "() => { if (new URLSearchParams(location.search).get('photo')) document.querySelector('#run')?.click(); }"
HEADS_JS = "(heads) => { window.__viewerMain?.drawHeads(heads); return []; }"
STYLE_JS = ("(upsampling, colormap, opacity, scale, show_alpha, hard_samples) => { window.__viewerStyle = "
            "{upsampling, colormap, opacity, scale, show_alpha, hard_samples};"
            " Object.values(window.__attentionViews || {}).forEach((v) => v.redraw()); return []; }")


def _wire_explore(c, h: Handlers):
    """Captioning (the button, the lecture number keys), explaining, and the head picker. Stepping
    (word clicks, Previous/Next, the arrows, the slider, Play) and restyling happen in the page
    (viewer.js, page_view.js) with no request: the slider keeps the word for the events that need it."""
    _caption_event(c, h, c.run.click)
    c.link_btn.click(None, [c.link_query, c.step], c.link, js=LINK_JS)
    ask_tab.wire(c, h, _decoded)
    for key, btn in enumerate(c.model_keys, 1):   # lecture number keys: that model, on the same photo
        _caption_event(c, h, btn.click(functools.partial(h.pick_model, key), None, c.model).success)
    c.step.change(None, c.step, None, js=STEP_JS)   # the server moved the word (a new caption, a branch)
    for control in c.style:
        if control is not c.head:   # (Explain with sets Scale and draws already)
            control.change(None, c.style, None, js=STYLE_JS)
    c.head.change(h.pick_head, [c.explored, *c.style], c.view, show_progress="hidden", **LIGHT)
    c.explain_with.input(h.explain_with, [c.explored, c.explain_with, c.step, *c.style],
                         [*c.step_outputs, c.scale], show_progress_on=c.view, **MODEL)


def _wire_branching(c, h: Handlers):
    """Branch from a word, back, reset, and choosing a beam: each brings a new trace."""
    def then_show(event):
        _decoded(c, h, event.success(h.show_trace, [c.explored, c.step, *c.style], c.step_outputs,
                                     show_progress="hidden"))
    then_show(c.branch_btn.click(h.branch, [c.explored, c.step, c.alternative, *c.style], [c.explored, c.step, c.beams],
                                 **MODEL))
    for btn, how in ((c.back_btn, "back"), (c.reset_btn, "reset")):
        then_show(btn.click(functools.partial(h.undo, how), [c.explored, *c.style], [c.explored, c.step, c.beams],
                            **MODEL))
    then_show(c.beams.select(h.choose_beam, [c.explored, c.beams, *c.style], [c.explored, c.step]))


def _wire_tools(c, h: Handlers, studio: S.Studio):
    """Heads, exports, Diagnose, references and scores, preparing the photo, clicking it."""
    c.heads_btn.click(h.show_heads, [c.explored, c.step], c.heads).success(None, c.heads, None, js=HEADS_JS)
    for btn, kind in ((c.png_view, "view"), (c.png_strip, "strip"), (c.png_heads, "heads"), (c.gif, "gif"),
                      (c.json_btn, "json")):
        btn.click(functools.partial(h.export, kind), [c.explored, c.step, *c.style], c.download)
    c.diagnose_btn.click(h.diagnose, [c.explored, c.step], c.diagnosis, **MODEL)
    c.trust_btn.click(h.trust, [c.explored, c.step, *c.style], c.trust, **MODEL)
    c.score_btn.click(h.score, [c.explored, c.references], c.scores)
    c.photo.change(lambda path: "\n".join(studio.references_for(path or "")), c.photo, c.references,
                   show_progress="hidden")
    for chosen in (c.photo, c.model):   # the photo opened and encoded, and in the page, before Caption
        chosen.change(h.prepare_photo, [c.photo, c.model], c.photo_key, show_progress="hidden", **MODEL)
    c.photo_key.change(None, c.photo_key, None, js=PHOTO_JS)
    c.occlude_btn.click(h.hide, [c.explored, c.step], c.occluded, **MODEL)
    c.view.select(h.click_photo, [c.explored, c.step, c.click_mode, *c.style], [c.clicked, c.steered_view], **MODEL)


THEME = gr.themes.Soft(primary_hue="amber", neutral_hue="slate")
