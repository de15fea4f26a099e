"""The Gradio app: layout and thin wiring; everything it shows comes from app/session.py.

`Handlers` holds what each event does (one method per event, calling the Studio); `build` lays
the page out and wires events to them. Stepping: the page swaps in the preloaded view of the new
word itself (KEYS) and the word slider, the one record of the word, tells the server. Nothing here
runs a model except Caption, Branch and Compare, and those go through the Studio's decode cache.
"""
from __future__ import annotations

import functools
import logging
import os
import time

import gradio as gr

from ..engine.checkpoints import CheckpointError
from ..engine.decoding import DecodeSettings
from ..engine.images import ImageError
from ..paths import ASSETS
from ..engine.render import COLORMAPS, SCALES, UPSAMPLING
from . import session as S

log = logging.getLogger("viewer.app")
DEFAULT_ORDER = ["sat-soft", "sat-hard", "updown", "transformer"]
HIDDEN = ["lecture-hide"]   # folded away in lecture mode
STEER, HIDE = "Steer: make the selected word look there", "Hide that place from the model"

CSS = """
#caption { font-size: 1.6rem; }
#caption .token { cursor: pointer; padding: 2px 4px; }
.step-facts { font-size: 1.15rem; margin-bottom: .5rem; }
.topk-title { font-weight: 600; margin: .3rem 0; }
.bar-row { display: flex; align-items: center; gap: .5rem; margin: 2px 0; font-size: 1.05rem; }
.bar-word { width: 7rem; text-align: right; }
.bar { height: 14px; background: #f59e0b; border-radius: 3px; }
.bar-p { color: #666; font-size: .9rem; }
table.grid14 td { font-size: 10px; padding: 1px 3px; text-align: right; border: 1px solid #eee; }
table.regions td, table.regions th { padding: 2px 8px; }
#view-urls { display: none; }
#speed { min-width: 200px; }
"""

# Lecture mode: <body class="lecture dark"> (set by the toggle #lecture, --lecture or Escape; no server
# round trip). In the page's head, because Gradio scopes the `css` rules inside its container.
LECTURE_STYLE = """
<style>
.model-keys, #lecture-line { display: none !important; }
body.lecture, body.lecture gradio-app, body.lecture .gradio-container { background: #000 !important; }
body.lecture .gradio-container { max-width: 100% !important; padding: 0 1.5rem !important; }
body.lecture .gradio-container .main, body.lecture .gradio-container .contain { padding: 0 !important;
  gap: 0 !important; }
body.lecture .lecture-hide, body.lecture #inputs, body.lecture #title, body.lecture #tabs > .tab-wrapper,
body.lecture #step, body.lecture footer { display: none !important; }
body.lecture #tabs, body.lecture #tabs .tabitem, body.lecture #tabs .column, body.lecture #caption,
body.lecture #view, body.lecture #lecture-line { background: transparent !important; border-color: transparent !important;
  box-shadow: none !important; padding: 0 !important; gap: .4rem !important; }
body.lecture #lecture-line { display: block !important; min-height: 0 !important; }
body.lecture #lecture-line .prose, body.lecture #lecture-line .html-container { padding: 0 !important; margin: 0 !important; }
body.lecture .lecture-line { display: flex; justify-content: space-between; align-items: baseline; gap: 2rem;
  color: #cbd5e1; font-size: 1.05rem; padding-top: .2rem; line-height: 1.3; }
body.lecture .lecture-line b { color: #fbbf24; font-size: 1.4rem; }
body.lecture #stage { height: 100vh; display: flex !important; flex-direction: column; flex-wrap: nowrap;
  gap: .5rem !important; overflow: hidden; }
body.lecture #stage > * { flex: 0 0 auto; }
body.lecture #caption { font-size: clamp(3rem, 3.3vw, 4.5rem) !important; line-height: 1.25;
  height: auto !important; max-height: none !important; overflow: visible !important; }
body.lecture #caption label, body.lecture #view label, body.lecture #view .icon-button-wrapper { display: none !important; }
body.lecture #caption .container { padding: 0 !important; }
body.lecture #caption .textfield, body.lecture #caption .token-container, body.lecture #caption .token {
  line-height: 1.2 !important; height: auto !important; padding-top: 0 !important; padding-bottom: 0 !important;
  background: transparent; }
body.lecture #caption .token { color: #fff !important; background: transparent !important; font-weight: 700;
  border-radius: .18em; padding: 0 .12em !important; margin: 0 !important; transition: none !important; }
body.lecture #caption .token.highlighted { background: #fbbf24 !important; color: #000 !important;
  box-shadow: 0 0 0 .08em #fbbf24, 0 .1em .5em rgba(251, 191, 36, .45); }
body.lecture #stage > #view { flex: 1 1 0 !important; height: auto !important; min-height: 0 !important; }
body.lecture #view .image-container, body.lecture #view button, body.lecture #view .image-frame {
  width: 100% !important; height: 100% !important; }
body.lecture #view img { width: 100% !important; height: 100% !important; object-fit: contain !important; }
body.lecture #controls { align-items: center; padding-bottom: .6rem !important; }
body.lecture #controls .form, body.lecture #controls .block { background: transparent !important;
  border-color: transparent !important; box-shadow: none !important; }
body.lecture #controls button { font-size: 1.2rem; }
body.lecture #speed input[type=number], body.lecture #speed .reset-button, body.lecture #speed .min_value,
body.lecture #speed .max_value { display: none !important; }
</style>
"""

KEYS = LECTURE_STYLE + """
<script>
// Keys: arrows move the word (the Previous/Next buttons), unless typing in a field.
const typing = (el) => !!el && (el.isContentEditable || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT'
  || (el.tagName === 'INPUT' && !['range', 'checkbox', 'radio', 'button', 'submit'].includes(el.type)));
document.addEventListener('keydown', (e) => {
  if (typing(document.activeElement) || e.ctrlKey || e.metaKey || e.altKey) return;
  const move = (d, button) => { if (!window.__viewerMove?.(d)) document.querySelector(button)?.click(); };
  if (e.key === 'ArrowRight') { move(1, '#next'); e.preventDefault(); }
  if (e.key === 'ArrowLeft') { move(-1, '#prev'); e.preventDefault(); }
});
// Lecture mode: a class on <body> (the toggle #lecture, or --lecture at load), and its keys:
// space play/pause, a number key a model (the #model-N buttons that exist), F full screen, Escape out of full screen, then out of lecture mode.
(() => {
  const box = () => document.querySelector('#lecture input[type=checkbox]');
  let wasDark = null;
  const set = (on) => {
    const b = document.body;
    if (on === b.classList.contains('lecture')) return;
    if (on) { wasDark = b.classList.contains('dark'); b.classList.add('lecture', 'dark'); }
    else { b.classList.remove('lecture'); if (!wasDark) b.classList.remove('dark'); }
  };
  document.addEventListener('change', (e) => {
    if (e.target.closest?.('#lecture')) set(e.target.checked);
  }, true);
  const start = new MutationObserver(() => { const b = box(); if (b) { start.disconnect(); set(b.checked); } });
  start.observe(document.documentElement, {subtree: true, childList: true});
  const leave = () => { const b = box(); if (b && b.checked) b.click(); else set(false); };
  document.addEventListener('keydown', (e) => {
    const el = document.activeElement;
    if (!document.body.classList.contains('lecture') || typing(el) || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key;
    if (k === ' ' || k === 'Spacebar') { el?.blur?.(); document.querySelector('#play')?.click(); }
    else if (/^[1-9]$/.test(k)) document.querySelector('#model-' + k)?.click();
    else if (k === 'f' || k === 'F') {
      if (document.fullscreenElement) document.exitFullscreen?.();
      else document.documentElement.requestFullscreen?.().catch(() => {});
    } else if (k === 'Escape') {
      if (document.fullscreenElement) document.exitFullscreen?.(); else leave();
    } else return;
    e.preventDefault();
  });
})();
// Instant stepping: after a caption the server names every word's view (#view-urls); the page
// preloads them and, on a word click, Previous/Next or the slider, shows the new word's view at
// once, while the server's reply (panel, coverage, the same view) follows.
(() => {
  // The names come with the caption, while the server is still drawing the views in word order:
  // fetch them one after another in that order (a view not drawn yet is asked again shortly).
  const V = {key: null, urls: [], ready: new Set(), images: []};
  const fileUrl = (p) => (window.gradio_config?.root || location.origin) + '/gradio_api/file=' + p;
  const load = (key, i, tries) => {
    const u = V.urls[i];
    if (key !== V.key || !u) return;
    if (V.ready.has(u)) { load(key, i + 1, 0); return; }
    const im = new Image();
    V.images.push(im);   // kept, decoded: showing it is then a paint, not a JPEG decode
    im.onload = () => im.decode().catch(() => {}).finally(() => { V.ready.add(u); load(key, i + 1, 0); });
    im.onerror = () => { if (tries < 20) setTimeout(() => load(key, i, tries + 1), 100); else load(key, i + 1, 0); };
    im.src = u;
  };
  const refresh = () => {
    const el = document.querySelector('#view-urls [data-urls]');
    const key = el ? el.dataset.urls : null;
    if (key === V.key) return;
    V.key = key; V.ready = new Set(); V.images = [];
    V.urls = key ? JSON.parse(key).map(fileUrl) : [];
    // the view the caption brought goes first: preloading starts once it is on screen (or after 1 s)
    const begin = Date.now(), first = V.urls[0];
    const start = () => {
      const im = document.querySelector('#view img');
      if (key !== V.key) return;
      if (Date.now() - begin < 1000 && !(im && im.src === first && im.complete)) { setTimeout(start, 30); return; }
      load(key, 0, 0);
    };
    start();
  };
  const show = (t) => {
    refresh();
    const u = V.urls[t], img = document.querySelector('#view img');
    if (u && img && V.ready.has(u) && img.src !== u) img.src = u;
  };
  // The word slider is the one record of the selected word: the page moves it at once (a word
  // click sets it quietly: the click's own event tells the server), so a quick next key counts
  // from the word shown, and the server, told by the slider's input event, agrees.
  const slider = () => document.querySelector('#step input[type=range]');
  const current = () => Number(slider()?.value || 1) - 1;
  window.__viewerMove = (d) => {
    const t = current() + d, s = slider();
    refresh();
    if (!s || !V.ready.has(V.urls[t])) return false;
    show(t);
    s.value = String(t + 1);
    s.dispatchEvent(new Event('input', {bubbles: true}));
    return true;
  };
  new MutationObserver(refresh).observe(document.documentElement, {subtree: true, childList: true});
  document.addEventListener('click', (e) => {
    const token = e.target.closest?.('#caption .token');
    if (token) {
      const t = [...document.querySelectorAll('#caption .token')].indexOf(token);
      show(t);
      if (slider() && V.ready.has(V.urls[t])) slider().value = String(t + 1);
    }
    else if (e.target.closest?.('#next')) show(current() + 1);
    else if (e.target.closest?.('#prev')) show(current() - 1);
  }, true);
  document.addEventListener('input', (e) => {
    if (e.target.closest?.('#step')) show(Number(e.target.value) - 1);
  }, true);
})();
</script>
"""


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


def friendly(fn):
    """Show a readable message for anything a person can cause; never a stack trace."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ImageError, CheckpointError, ValueError) as err:
            raise gr.Error(str(err), print_exception=False) from None
        except Exception as err:  # noqa: BLE001 - the UI must never show a traceback
            log.exception("unexpected error in %s", fn.__name__)
            raise gr.Error(f"Something went wrong ({type(err).__name__}); the server log has details.",
                           print_exception=False) from None
    return wrapper


def _settings(strategy, beam, temperature, seed, max_len) -> DecodeSettings:
    return DecodeSettings(strategy=S.STRATEGY_LABELS[strategy], beam_size=int(beam), temperature=float(temperature),
                          seed=int(seed or 0), max_len=int(max_len))


def _style(upsampling, colormap, opacity, scale, show_alpha, hard_samples, head) -> S.Style:
    return S.Style(upsampling, colormap, float(opacity), scale, bool(show_alpha), int(hard_samples), head)


class Handlers:
    """Every event handler of the app, one method each: what a click, key or slider does, calling the
    Studio (session.py) for the work. `build` only lays the page out and wires these up."""

    def __init__(self, studio: S.Studio, models: list[str]):
        self.studio, self.models = studio, models

    @friendly
    def caption_photo(self, path, model_name, strat, k, temp, sd, mlen, *style, progress=gr.Progress()):
        if not path:
            raise gr.Error("Choose a photo first: upload, paste, drop, or click an example.")
        if not model_name:
            raise gr.Error("No model is available: see checkpoints/README.md.")
        progress(0.1, desc=f"{model_name} is looking at the photo")
        start = time.perf_counter()
        ex = self.studio.explore(path, model_name, _settings(strat, k, temp, sd, mlen))
        ex.photo.name = os.path.basename(path)
        took = time.perf_counter() - start
        note = f"**{model_name}**: {len(ex.beams)} caption(s) in {took:.2f} s. Click a word, or use ← →."
        # the first word's view at once; the other words' are drawn from now on, in word order, and
        # their names go with this reply so the page can fetch each as soon as it exists
        st = _style(*style)
        reply = self._step_reply(ex, 1, st, coverage=False)
        self.studio.prerender(ex, st)
        return (ex, gr.Radio(choices=S.beam_choices(ex), value=ex.beam), note, *reply,
                S.view_urls_html(self.studio.view_paths(ex, st)))

    def _trace_views(self, ex):
        return (gr.Slider(minimum=1, maximum=max(2, ex.n_steps), value=ex.step + 1, step=1),
                gr.Radio(choices=S.beam_choices(ex), value=ex.beam))

    @friendly
    def show_step(self, ex, t, *style):
        """Everything that changes with the word, in one reply: every event that moves the word
        (slider, word click, arrow keys, play) calls this once; the views were drawn in advance."""
        if ex is None:
            return (gr.Slider(), None, None, "", None, "", gr.Radio(choices=[]))
        return self._step_reply(ex, t, _style(*style))

    def _step_reply(self, ex, t, st, coverage=True):
        ex.go_to(t)
        words = [w for w, _ in ex.trace.steps[ex.step].alternatives]
        return (gr.Slider(minimum=1, maximum=max(2, ex.n_steps), value=ex.step + 1, step=1),
                self.studio.view(ex, st, ex.step), S.caption_tokens(ex), S.step_panel(ex),
                self.studio.view(ex, st, ex.step, "coverage") if coverage else gr.skip(), S.grid_numbers(ex),
                gr.Radio(choices=words, value=None))

    @friendly
    def after_decode(self, ex, *style):
        """Every word's views drawn in the background and their names for the browser to preload
        (stepping then swaps pictures in the page), and the head picker's entries."""
        if ex is None:
            return "", gr.Dropdown(), None
        st = _style(*style)
        self.studio.prerender(ex, st).result()   # the page preloads the names it gets: they must exist
        choices = S.head_choices(ex.trace)
        return S.view_urls_html(self.studio.view_paths(ex, st)), gr.Dropdown(
            choices=choices, value=st.head if st.head in choices else S.MEAN_HEADS), \
            self.studio.view(ex, st, ex.step, "coverage")

    @friendly
    def draw_strip(self, ex, *style):
        return None if ex is None else self.studio.image_file(S.strip(ex, _style(*style)))

    @friendly
    def show_heads(self, ex, *style):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        return self.studio.image_file(S.all_heads(ex, _style(*style)))

    @friendly
    def restyle(self, ex, t, *style):
        return (*self.show_step(ex, t, *style), self.after_decode(ex, *style)[0], self.draw_strip(ex, *style))

    def move(self, delta, ex, t, *style):
        return self.show_step(ex, t + delta, *style)

    def click_word(self, ex, upsampling_, colormap_, opacity_, scale_, show_alpha_, hard_samples_, head_,
                   evt: gr.SelectData):
        t = int(evt.index) if isinstance(evt.index, int) else int(evt.index[0])
        return self.show_step(ex, t + 1, upsampling_, colormap_, opacity_, scale_, show_alpha_, hard_samples_, head_)

    @friendly
    def pick_model(self, key):
        return gr.Dropdown(value=S.model_for_key(self.models, key))

    def tick(self, ex, t, *style):
        if ex is None or t >= ex.n_steps:
            return (*self.show_step(ex, t, *style), gr.Timer(active=False), False, gr.Button(value="▶ Play"))
        return (*self.show_step(ex, t + 1, *style), gr.Timer(), True, gr.Button())

    def toggle_play(self, ex, t, is_playing):
        if ex is None or is_playing:
            return gr.Timer(active=False), False, gr.Button(value="▶ Play"), gr.Slider()
        start = 1 if t >= ex.n_steps else t
        return gr.Timer(active=True), True, gr.Button(value="⏸ Pause"), gr.Slider(value=int(start))

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
        st = _style(*style)
        if kind == "json":
            path = self.studio.export_json(ex)
        elif kind == "gif":
            path = self.studio.export_gif(ex, st)
        else:
            draw = {"strip": S.strip, "heads": S.all_heads, "view": S.overlay}[kind]
            path = self.studio.export_png(ex, draw(ex, st), kind)
        return gr.File(value=path, visible=True)

    @friendly
    def load_triage(self, name):
        if not name:
            return [], None
        rows = self.studio.triage_rows(name)
        return rows, gr.Dataframe(value=S.triage_table(rows), headers=S.TRIAGE_COLUMNS)

    def open_row(self, rows, evt: gr.SelectData):
        row = rows[evt.index[0]] if rows and evt.index is not None else None
        if row is None or not os.path.isfile(row["image"]):
            raise gr.Error("That photo is not on this machine any more.")
        models_now = self.studio.models()
        return row["image"], gr.Dropdown(value=row["model"] if row["model"] in models_now else None), \
            gr.Tabs(selected="explore")

    @friendly
    def score(self, ex, text):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        refs = [line.strip() for line in (text or "").splitlines() if line.strip()]
        result = self.studio.score(ex, refs)
        return S.score_html(ex.trace.caption, result, corpus="CIDEr" in result)

    @friendly
    def diagnose(self, ex):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        return S.diagnosis(self.studio, ex)

    @friendly
    def hide(self, ex):
        if ex is None:
            raise gr.Error("Caption a photo first.")
        return S.occlusion(self.studio, ex)

    @friendly
    def click_photo(self, ex, mode, upsampling_, colormap_, opacity_, scale_, show_alpha_, hard_samples_, head_,
                    evt: gr.SelectData):
        """Steer the selected word's attention to the clicked place, or hide that place."""
        style = (upsampling_, colormap_, opacity_, scale_, show_alpha_, hard_samples_, head_)
        if ex is None:
            raise gr.Error("Caption a photo first.")
        if evt is None or evt.index is None:
            return gr.HTML(), gr.Image()
        x, y = evt.index[:2]
        if mode == HIDE:
            return S.occlusion(self.studio, ex, [S.unit_at(ex, x, y)]), gr.Image(visible=False)
        page, result = S.steering(self.studio, ex, x, y)
        one = S.Exploration(ex.photo, ex.model, ex.settings, [result.trace], display=ex.display)
        return page, gr.Image(value=self.studio.view(one, _style(*style), result.step), visible=True)

    @friendly
    def compare(self, ex, names, mode, text, *style):
        if ex is None:
            raise gr.Error("Caption a photo in Explore first; Compare uses the same photo.")
        names = list(names or [])
        if not 1 <= len(names) <= 3:
            raise gr.Error("Choose 1 to 3 self.models.")
        same = None
        if mode == "Same caption for all":
            same = self.studio.compare_caption(ex, names, text)
        traces = self.studio.compare(ex.photo, names, ex.settings, same)
        longest = max(len(tr.steps) for tr in traces)
        return traces, gr.Slider(minimum=1, maximum=max(2, longest), value=1)

    @friendly
    def export_figure(self, ex, traces, *style):
        if ex is None or not traces:
            raise gr.Error("Run Compare first (same caption for all gives the paper's soft-vs-hard figure).")
        return gr.File(value=self.studio.export_png(ex, S.figure(ex, traces, _style(*style)), "figure"), visible=True)

    @friendly
    def show_compare(self, ex, traces, t, *style):
        blank = [None] * 3, [""] * 3
        if ex is None or not traces:
            return [*blank[0], *blank[1]]
        st = _style(*style)
        views, texts = [], []
        for tr in traces:
            k = min(int(t), len(tr.steps)) - 1
            one = S.Exploration(ex.photo, tr.model, ex.settings, [tr], step=k, display=ex.display)
            views.append(self.studio.view(one, st, k))
            texts.append(S.compare_line(tr, k))
        views += [None] * (3 - len(views))
        texts += [""] * (3 - len(texts))
        return [*views, *texts]


def build(studio: S.Studio, lecture: bool = False) -> gr.Blocks:
    """The app; `lecture`: start in lecture mode (big type, full-screen view, keys; see KEYS)."""
    os.makedirs(studio.view_dir, exist_ok=True)
    gr.set_static_paths([studio.view_dir])   # views are served as they are: their names are known in advance
    models = sorted(studio.models(), key=lambda m: (m not in DEFAULT_ORDER, DEFAULT_ORDER.index(m) if m in DEFAULT_ORDER else 0, m))
    h = Handlers(studio, models)
    examples = [os.path.join(ASSETS, n) for n in sorted(os.listdir(ASSETS)) if n.endswith(".jpg")]
    # uploads and served images in Gradio's cache are deleted an hour after they were made
    with gr.Blocks(title="Attention viewer", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        explored = gr.State(None, time_to_live=3600)
        compared = gr.State(None, time_to_live=3600)
        gr.Markdown("## Attention viewer: watch a captioning model look, word by word", elem_id="title")
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Explore", id="explore"):
                with gr.Row():
                    with gr.Column(scale=1, min_width=320, elem_id="inputs"):
                        photo = PhotoInput(label="Photo: upload, paste or drop", type="filepath", elem_id="photo",
                                           sources=["upload", "clipboard"], height=260)
                        gr.Examples(examples, inputs=photo, label="Examples")
                        model = gr.Dropdown(models, value=models[0] if models else None, label="Model",
                                            elem_id="model")
                        with gr.Accordion("Decoding", open=False, elem_classes=HIDDEN):
                            strategy = gr.Radio(list(S.STRATEGY_LABELS), value="Beam search", label="Strategy",
                                                elem_id="strategy")
                            beam = gr.Slider(1, 8, value=3, step=1, label="Beam size")
                            temperature = gr.Slider(0.1, 2.0, value=1.0, step=0.1, label="Temperature (sampling)")
                            seed = gr.Number(0, precision=0, label="Seed (sampling, hard attention)")
                            max_len = gr.Slider(3, 30, value=20, step=1, label="Max words")
                        run = gr.Button("Caption", variant="primary", elem_id="run")
                        status = gr.Markdown(elem_id="status")
                        with gr.Accordion("Overlay", open=True, elem_classes=HIDDEN):
                            upsampling = gr.Radio(list(UPSAMPLING), value="smooth", label="Upsampling",
                                                  elem_id="upsampling")
                            colormap = gr.Dropdown(list(COLORMAPS), value="paper", label="Colours (paper: the "
                                                   "figures of Show, Attend and Tell)", elem_id="colormap")
                            opacity = gr.Slider(0.0, 1.0, value=0.8, step=0.05, label="Opacity", elem_id="opacity")
                            scale = gr.Radio(list(SCALES), value="absolute", elem_id="scale",
                                             label="Scale: absolute (same brightness, same weight, on every word and "
                                                   "model) or stretch (each map to its own range)")
                            show_alpha = gr.Checkbox(True, label="Hard attention: show alpha under the sampled cell")
                            hard_samples = gr.Slider(1, 20, value=1, step=1, label="Hard attention: cells drawn")
                            head = gr.Dropdown([S.MEAN_HEADS], value=S.MEAN_HEADS, elem_id="head",
                                               label="Transformer: which cross-attention map")
                    with gr.Column(scale=3, elem_id="stage"):
                        lecture_line = gr.HTML(S.lecture_line(models[0] if models else None),
                                               elem_id="lecture-line")
                        caption = gr.HighlightedText(label="Caption: click a word", elem_id="caption",
                                                     combine_adjacent=False, show_legend=False, show_inline_category=False,
                                                     interactive=False,
                                                     color_map={"selected": "#f59e0b", "branched": "#93c5fd"})
                        view = gr.Image(label="Where the model looked", elem_id="view", interactive=False,
                                        height=540, format="png")
                        view_urls = gr.HTML(elem_id="view-urls")   # every word's view, preloaded by KEYS
                        with gr.Row(elem_id="controls", equal_height=True):
                            prev_btn = gr.Button("◀ Previous", elem_id="prev", size="sm")
                            play_btn = gr.Button("▶ Play", elem_id="play", size="sm")
                            next_btn = gr.Button("Next ▶", elem_id="next", size="sm")
                            speed = gr.Slider(0.4, 3.0, value=0.9, step=0.1, label="Play: seconds per word",
                                              elem_id="speed", scale=2)
                            gr.Checkbox(lecture, label="Lecture mode", elem_id="lecture",   # toggled by KEYS
                                        interactive=True, scale=1, min_width=140)
                        with gr.Row(elem_classes=["model-keys"]):   # clicked by the number keys (KEYS)
                            model_keys = [gr.Button(f"Model {i}", elem_id=f"model-{i}") for i in S.MODEL_KEYS]
                        step = gr.Slider(1, 2, value=1, step=1, label="Word", elem_id="step")
                        click_mode = gr.Radio([STEER, HIDE], value=STEER, label="Clicking the photo", elem_id="click-mode",
                                              elem_classes=HIDDEN)
                        with gr.Row(elem_classes=HIDDEN):
                            clicked = gr.HTML(elem_id="clicked")
                            steered_view = gr.Image(label="Where you steered it", height=220, interactive=False,
                                                    elem_id="steered-view", visible=False)
                        with gr.Row(elem_classes=HIDDEN):
                            panel = gr.HTML(elem_id="panel")
                            coverage = gr.Image(label="Coverage: attention summed so far", height=220,
                                                interactive=False, elem_id="coverage")
                        with gr.Accordion("Branch: choose another word here and let the model go on", open=False,
                                          elem_classes=HIDDEN):
                            alternative = gr.Radio([], label="Next word", elem_id="alternative")
                            with gr.Row():
                                branch_btn = gr.Button("Continue with this word", elem_id="branch")
                                back_btn = gr.Button("Back", elem_id="back")
                                reset_btn = gr.Button("Reset", elem_id="reset")
                        beams = gr.Radio([], label="Beams (best first)", elem_id="beams", type="index", elem_classes=HIDDEN)
                        with gr.Accordion("Diagnose: grounding, attention sanity, occlusion", open=False,
                                          elem_classes=HIDDEN):
                            gr.Markdown("Hide where the selected word looked (or choose 'Hide' above and click the "
                                        "photo), and see how the caption changes.")
                            with gr.Row():
                                diagnose_btn = gr.Button("Check this caption", elem_id="diagnose")
                                occlude_btn = gr.Button("Hide where this word looked", elem_id="occlude")
                            diagnosis = gr.HTML(elem_id="diagnosis")
                            occluded = gr.HTML(elem_id="occluded")
                            references = gr.Textbox(label="References, one per line (filled in for photos of "
                                                          "the dataset given with --data)", lines=3,
                                                    elem_id="references")
                            score_btn = gr.Button("Score the caption against them", elem_id="score")
                            scores = gr.HTML(elem_id="scores")
                        with gr.Accordion("All heads of this word (Transformer): layers as rows, heads as columns",
                                          open=False, elem_classes=HIDDEN):
                            with gr.Row():
                                heads_btn = gr.Button("Show every layer and head for the selected word", size="sm",
                                                      elem_id="heads-show")
                                png_heads = gr.Button("PNG of all heads", size="sm", elem_id="export-heads")
                            heads_view = gr.Image(show_label=False, elem_id="heads", interactive=False, format="png")
                        with gr.Accordion("Raw attention numbers", open=False, elem_classes=HIDDEN):
                            numbers = gr.HTML(elem_id="numbers")
                        gr.Markdown("**Every word with its attention** (the paper's figure)", elem_classes=HIDDEN)
                        strip = gr.Image(show_label=False, elem_id="strip", interactive=False, format="png",
                                         elem_classes=HIDDEN)
                        with gr.Row(elem_classes=HIDDEN):
                            png_view = gr.Button("PNG of this view", size="sm", elem_id="export-view")
                            png_strip = gr.Button("PNG of the word strip", size="sm", elem_id="export-strip")
                            gif = gr.Button("Animated GIF", size="sm", elem_id="export-gif")
                            json_btn = gr.Button("JSON trace", size="sm", elem_id="export-json")
                        download = gr.File(label="Download", elem_id="download", interactive=False, visible=False,
                                           elem_classes=HIDDEN)
            with gr.Tab("Compare", id="compare"):
                gr.Markdown("Same photo (from Explore), 2 or 3 models, synchronised words.")
                with gr.Row():
                    cmp_models = gr.CheckboxGroup(models, value=models[:3], label="Models", elem_id="cmp-models")
                    cmp_mode = gr.Radio(["Each model's own caption", "Same caption for all"],
                                        value="Same caption for all", label="Words", elem_id="cmp-mode")
                    cmp_text = gr.Textbox(label="Caption to force (empty: the first model's caption)",
                                          elem_id="cmp-text")
                cmp_run = gr.Button("Compare", variant="primary", elem_id="cmp-run")
                cmp_step = gr.Slider(1, 2, value=1, step=1, label="Word", elem_id="cmp-step")
                with gr.Row():
                    cmp_views = [gr.Image(interactive=False, elem_id=f"cmp-view-{i}", height=380) for i in range(3)]
                with gr.Row():
                    cmp_captions = [gr.Markdown(elem_id=f"cmp-caption-{i}") for i in range(3)]
                cmp_figure = gr.Button("PNG of the paper's figure: one row per model, one column per word",
                                       size="sm", elem_id="cmp-figure")
                cmp_download = gr.File(label="Download", elem_id="cmp-download", interactive=False, visible=False)
            with gr.Tab("Triage", id="triage"):
                gr.Markdown(f"Runs of `python -m viewer triage --out {studio.triage_dir}/NAME ...`, worst first. "
                            "Click a row to open that photo in Explore.")
                with gr.Row():
                    triage_run = gr.Dropdown(studio.triage_runs(), label="Run", elem_id="triage-run")
                    triage_refresh = gr.Button("Refresh the list", size="sm")
                triage_table = gr.Dataframe(interactive=False, elem_id="triage-table", wrap=True)
                triage_rows = gr.State([])
        timer = gr.Timer(0.9, active=False)
        playing = gr.State(False)

        style_inputs = [upsampling, colormap, opacity, scale, show_alpha, hard_samples, head]
        step_outputs = [step, view, caption, panel, coverage, numbers, alternative]

        render_step = dict(fn=h.show_step, inputs=[explored, step, *style_inputs], outputs=step_outputs,
                           show_progress="hidden")
        views_after = dict(fn=h.after_decode, inputs=[explored, *style_inputs], outputs=[view_urls, head, coverage],
                           show_progress="hidden")
        strip_after = dict(fn=h.draw_strip, inputs=[explored, *style_inputs], outputs=strip, show_progress="hidden")

        def decoded(event):
            """After anything that brings a new trace: its views, then its word strip."""
            return event.success(**views_after).success(**strip_after)
        decode_inputs = [photo, model, strategy, beam, temperature, seed, max_len, *style_inputs]
        said = dict(fn=lambda ex: S.lecture_line(ex.model if ex else None), inputs=explored, outputs=lecture_line,
                    show_progress="hidden")
        # the progress overlay on the view alone: drawn over every output, its timers cost a 2-core
        # machine's browser more than the caption itself
        captioned = run.click(h.caption_photo, decode_inputs, [explored, beams, status, *step_outputs, view_urls],
                              concurrency_limit=4, show_progress_on=view)
        decoded(captioned)
        captioned.success(**said)
        for key, btn in enumerate(model_keys, 1):   # lecture number keys: that model, on the same photo
            captioned = btn.click(functools.partial(h.pick_model, key), None, model).success(
                h.caption_photo, decode_inputs, [explored, beams, status, *step_outputs, view_urls], concurrency_limit=4,
                show_progress_on=view)
            decoded(captioned)
            captioned.success(**said)
        speed.change(lambda s: gr.Timer(value=float(s)), speed, timer, show_progress="hidden")
        step.input(h.show_step, [explored, step, *style_inputs], step_outputs, show_progress="hidden")
        for control in style_inputs:
            control.change(h.restyle, [explored, step, *style_inputs], [*step_outputs, view_urls, strip],
                           show_progress="hidden")
        prev_btn.click(functools.partial(h.move, -1), [explored, step, *style_inputs], step_outputs,
                       show_progress="hidden")
        next_btn.click(functools.partial(h.move, +1), [explored, step, *style_inputs], step_outputs,
                       show_progress="hidden")
        caption.select(h.click_word, [explored, *style_inputs], step_outputs, show_progress="hidden")
        play_btn.click(h.toggle_play, [explored, step, playing], [timer, playing, play_btn, step]).success(**render_step)
        timer.tick(h.tick, [explored, step, *style_inputs], [*step_outputs, timer, playing, play_btn],
                   show_progress="hidden")
        decoded(branch_btn.click(h.branch, [explored, step, alternative, *style_inputs],
                                 [explored, step, beams]).success(**render_step))
        for btn, how in ((back_btn, "back"), (reset_btn, "reset")):
            decoded(btn.click(functools.partial(h.undo, how), [explored, *style_inputs],
                              [explored, step, beams]).success(**render_step))
        decoded(beams.select(h.choose_beam, [explored, beams, *style_inputs], [explored, step]).success(**render_step))
        heads_btn.click(h.show_heads, [explored, *style_inputs], heads_view)
        for btn, kind in ((png_view, "view"), (png_strip, "strip"), (png_heads, "heads"), (gif, "gif"),
                          (json_btn, "json")):
            btn.click(functools.partial(h.export, kind), [explored, step, *style_inputs], download)
        triage_run.change(h.load_triage, triage_run, [triage_rows, triage_table])
        triage_refresh.click(lambda: gr.Dropdown(choices=studio.triage_runs()), None, triage_run)
        decoded(triage_table.select(h.open_row, triage_rows, [photo, model, tabs]).success(
            h.caption_photo, [photo, model, strategy, beam, temperature, seed, max_len, *style_inputs],
            [explored, beams, status, *step_outputs]))
        diagnose_btn.click(h.diagnose, explored, diagnosis)
        score_btn.click(h.score, [explored, references], scores)
        photo.change(lambda path: "\n".join(studio.references_for(path or "")), photo, references,
                     show_progress="hidden")
        occlude_btn.click(h.hide, explored, occluded)
        view.select(h.click_photo, [explored, click_mode, *style_inputs], [clicked, steered_view])
        cmp_run.click(h.compare, [explored, cmp_models, cmp_mode, cmp_text, *style_inputs], [compared, cmp_step])
        cmp_step.change(h.show_compare, [explored, compared, cmp_step, *style_inputs], [*cmp_views, *cmp_captions],
                        show_progress="hidden")
        cmp_figure.click(h.export_figure, [explored, compared, *style_inputs], cmp_download)
        compared.change(h.show_compare, [explored, compared, cmp_step, *style_inputs], [*cmp_views, *cmp_captions],
                        show_progress="hidden")
    return demo


THEME = gr.themes.Soft(primary_hue="amber", neutral_hue="slate")
