"""What the app does, without Gradio: decode once, then every view is rendered from cached traces.

An `Exploration` is one person's current photo + model + settings with its decoded beams; the
UI keeps it in per-session state. Stepping, restyling and exporting only read it. Decodes are
memoised in a bounded LRU keyed by (photo, model, settings, forced prefix), so switching back
to a model or undoing a branch never re-runs anything.
"""
from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from ..engine.decoding import DecodeSettings
from ..analysis.diagnose import cell_at
from ..analysis.evaluate import caption_scores
from ..analysis.triage import list_runs, read_run
from ..engine.images import INPUT_SIZE, AttendsTo, ImageError, Photo, cell_boxes, load_photo
from ..paths import TRIAGE_DIR
from ..engine.pipeline import ANSWER_TOKENS, Captioner, photo_key
from ..engine.render import (paper_operator, render_cells, render_figure, render_gif, render_heads, render_step, render_strip)
from ..engine.trace import AttentionTrace
from ..engine.vision.boxes import CONTEXT
from ..analysis.explain import IMPUTERS, Explanation, Pipeline, available_methods, explain, explained_trace
from ..analysis.language_prior import References, caption_prior, verdict
from ..analysis.pixel_faithfulness import Deletion, deletion, seen_dependence

STRATEGY_LABELS = {"Beam search": "beam", "Greedy": "greedy", "Sampling": "sample"}
FLICKR8K_LINE = ("Every model here learnt from Flickr8k's 6,000 photos: mostly people and dogs; "
                 "other scenes get Flickr8k words.")


MEAN_HEADS = "mean of the last layer's heads"
HEADS_SENT = 250_000   # the heads grid gets every word's heads up to this many numbers, else the selected word's
HARD_DRAWS = 20   # hard attention: cells drawn from alpha, sent to the page once; it shows the first N (a style)
VIEW_SIDE = 1280   # views are drawn at most this large: sharp on a 1080p projector, quick to encode and send
MIN_VIEW_SIDE = 960  # and at least this large: the browser maps a click to image pixels only if the
                     # image is not shown larger than it is (the view pane is 540 px high)


@dataclass(frozen=True)
class Style:
    """How attention is drawn; the defaults are the paper's look on the absolute scale."""

    upsampling: str = "smooth"
    colormap: str = "paper"
    opacity: float = 0.8
    scale: str = "absolute"      # or "stretch": each map to its own range
    show_alpha: bool = True      # hard attention: draw alpha under the sampled cell
    hard_samples: int = 1        # hard attention: how many cells to draw from alpha
    head: str = MEAN_HEADS       # multi-head models: the summary map, or "layer L head H"

    def as_kwargs(self) -> dict:
        return {"style": self.upsampling, "cmap": self.colormap, "opacity": self.opacity, "scale": self.scale,
                "head": head_index(self.head)}

    def inputs(self) -> tuple:
        """The style as the app's API takes it (the Overlay controls, in order)."""
        return (self.upsampling, self.colormap, self.opacity, self.scale, self.show_alpha, self.hard_samples, self.head)


def head_choices(trace: AttentionTrace) -> list[str]:
    """The head picker's entries for a trace: the summary map, then every layer's heads."""
    heads = trace.steps[0].heads if trace.steps else None
    if heads is None:
        return [MEAN_HEADS]
    return [MEAN_HEADS] + [f"layer {i + 1} head {j + 1}" for i in range(heads.shape[0]) for j in range(heads.shape[1])]


def head_index(choice: str) -> tuple[int, int] | None:
    """'layer 2 head 5' -> (1, 4); the summary -> None."""
    if not choice or choice == MEAN_HEADS:
        return None
    _, layer, _, head = choice.split()
    return int(layer) - 1, int(head) - 1


def display_copy(photo: Photo, side: int = VIEW_SIDE, min_side: int = MIN_VIEW_SIDE) -> np.ndarray:
    """The photo with its longer side between `min_side` and `side` pixels: what every view is drawn on."""
    h, w = photo.rgb.shape[:2]
    if min_side <= max(h, w) <= side:
        return photo.rgb
    from PIL import Image
    s = min(side, max(min_side, max(h, w))) / max(h, w)
    return np.asarray(Image.fromarray(photo.rgb).resize((max(1, round(w * s)), max(1, round(h * s))),
                                                       Image.Resampling.BILINEAR))


def thumbnail(rgb: np.ndarray, width: int) -> np.ndarray:
    from PIL import Image
    h, w = rgb.shape[:2]
    return np.asarray(Image.fromarray(rgb).resize((width, max(1, round(width * h / w))), Image.Resampling.LANCZOS))


def jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


VIEW_PREFIX = "attention-viewer-"   # a Studio's folder (export_dir); its views/ hold content-named JPEGs
_VIEW_URL = re.compile(r"/file=.*/" + VIEW_PREFIX + r"[^/]+/views/(?:overlay-|coverage-)?[0-9a-f]{40}\.jpg$")


def is_view_url(path: str) -> bool:
    """Is this URL path one of the content-named views a Studio serves (never rewritten)?"""
    return bool(_VIEW_URL.search(path))


def view_key(ex: "Exploration") -> bytes:
    """A digest of what a view of `ex`'s current trace depends on: the photo as drawn and every
    word's attention (a view's name, so equal views of equal decodes share one file)."""
    h = hashlib.sha1(repr(ex.display.shape).encode())
    h.update(np.ascontiguousarray(ex.display[::8, ::8]).tobytes())
    trace = ex.shown
    h.update(repr((trace.model, trace.attends_to, trace.width, trace.height, trace.region_labels,
                   [(s.word, s.logprob, s.beta, s.sample, s.steered) for s in trace.steps])).encode())
    for s in trace.steps:
        h.update(np.ascontiguousarray(s.attention).tobytes())
        if s.heads is not None:
            h.update(np.ascontiguousarray(s.heads).tobytes())
    for extra in (trace.region_boxes, trace.region_scores):
        if extra is not None:
            h.update(np.ascontiguousarray(extra).tobytes())
    return h.digest()


@dataclass(frozen=True)
class OpenedPhoto:
    """A chosen photo as the app holds it (Studio.open_photo): decoded, its display copy, and the key
    the page fetches that copy by."""
    photo: Photo
    display: np.ndarray
    key: str


@dataclass
class Exploration:
    photo: Photo
    model: str
    settings: DecodeSettings
    beams: list[AttentionTrace]
    beam: int = 0
    step: int = 0
    prefixes: list[list[int]] = field(default_factory=list)   # branching history (token ids), newest last
    display: np.ndarray | None = None                         # the photo as views draw it (display_copy)
    display_key: str | None = None                            # names `display` for the page (Studio.view_photo)
    method: str = "attention"                                 # what the views show (analysis/explain.py)
    explained: dict = field(default_factory=dict)             # (method, tokens) -> Explanation, computed so far
    dependence: dict = field(default_factory=dict)            # tokens -> (T,) visual dependence, nats
    guessed: dict = field(default_factory=dict)               # tokens -> (T,) bool: would have said it of most photos
    unseen: dict = field(default_factory=dict)                # tokens -> {word index: why}: objects the detector misses
    sent_view: str | None = None                              # the key of what the page's view holds (Studio.page_view)
    required: tuple | None = None                             # the words the caption must include (Studio.decode)
    avoid: tuple = ()                                         # words it must not say (guided: classes not detected)

    def __post_init__(self):
        if self.display is None:
            self.display = display_copy(self.photo)

    @property
    def trace(self) -> AttentionTrace:
        """The model's own trace: its words and the attention that emitted them."""
        return self.beams[self.beam]

    @property
    def shown(self) -> AttentionTrace:
        """What the views draw: the model's attention, or the chosen explanation's maps on its words."""
        found = self.explained.get((self.method, self.tokens))
        return self.trace if self.method == "attention" or found is None else \
            explained_trace(self.trace, found, self.method)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The shown caption's token ids: what its explanations and dependence are keyed by and forced on."""
        return tuple(self.trace.token_ids)

    @property
    def key(self) -> tuple:
        """What the shown trace's explanations and dependence are computed from: photo, model, tokens and
        (an answer) the question."""
        return photo_key(self.photo), self.model, self.tokens, self.trace.question

    @property
    def n_steps(self) -> int:
        return len(self.trace.steps)

    def go_to(self, word: int) -> int:
        """Select word `word` (1-based, as the word slider counts), clamped to the caption; returns the
        0-based step. In place: the session's state and the page's slider must name the same word."""
        self.step = int(min(max(1, word), self.n_steps)) - 1
        return self.step

    def choose_beam(self, index: int) -> None:
        """Show beam `index` from its first word (in place, like `go_to`)."""
        self.beam, self.step = int(index), 0


def _look(path: str | None) -> str:
    """`Studio.look` of the checkpoint at `path` ("attention" where it says none, or cannot be read:
    its first use says why)."""
    from ..engine.checkpoints import CheckpointError, read_meta
    try:
        return read_meta(path).get("hparams", {}).get("look", "attention") if path else "attention"
    except CheckpointError:
        return "attention"


def _trained_on(path: str) -> str | None:
    """The data the checkpoint at `path` says it learnt from (its metadata's training.data), else None."""
    from ..engine.checkpoints import CheckpointError, read_meta
    try:
        training = read_meta(path).get("training")
    except CheckpointError:
        return None
    return training.get("data") if isinstance(training, dict) else None


def trained_on_line(data: dict[str, str | None]) -> str:
    """One line on what the models (name -> the data their metadata names, None: unsaid) have read:
    the Flickr8k line when none names other data, else each data set with its models."""
    if all(d is None or d.lower().startswith("flickr8k") for d in data.values()):
        return FLICKR8K_LINE
    by_data: dict[str, list[str]] = {}
    for name, d in data.items():
        by_data.setdefault(d or "not stated", []).append(name)
    return ("Learnt from " + "; ".join(f"{d} ({', '.join(names)})" for d, names in by_data.items())
            + ": scenes unlike those photos get those photos' words.")


class Studio:
    """Shared by all sessions: the captioner and a bounded cache of decodes (thread-safe)."""

    def __init__(self, captioner: Captioner, max_decodes: int = 128, max_exports: int = 200, dataset=None,
                 max_decode_bytes: int = 256 * 2 ** 20):
        self.captioner = captioner
        self.dataset = dataset   # a CaptionSet (--data): references for its photos, a corpus for CIDEr
        self.reference_photos = References.of(dataset)   # the guessed verdict's photos (None: not measured)
        self.references_by_name = {} if dataset is None else {
            os.path.basename(path): refs for path, refs in dataset.captions.items()}
        self.max_decodes, self.max_exports = max_decodes, max_exports
        self.max_decode_bytes = max_decode_bytes   # a BLIP trace's heads are megabytes: bounded in bytes too
        self._decodes: OrderedDict[tuple, list[AttentionTrace]] = OrderedDict()
        self._explanations: OrderedDict[tuple, Explanation] = OrderedDict()
        self._pipes: dict[tuple, Pipeline] = {}
        self._deletions: OrderedDict[tuple, Deletion] = OrderedDict()
        self._dependences: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._detections: OrderedDict[tuple, object] = OrderedDict()   # the detector's regions per photo (guidance)
        self._computing: dict[tuple, threading.Lock] = {}   # keys being computed by `_once`
        self._opened: OrderedDict[tuple, OpenedPhoto] = OrderedDict()   # photo files opened (open_photo)
        self._displays: OrderedDict[str, str] = OrderedDict()             # display copies for the page (view_photo)
        self._lock = threading.Lock()
        self.export_dir = tempfile.mkdtemp(prefix=VIEW_PREFIX)
        atexit.register(self.close)

    def decode_bytes(self) -> int:
        """Memory held by the cached decodes (their maps and heads)."""
        return sum(t.nbytes for traces in self._decodes.values() for t in traces)

    def close(self) -> None:
        """Remove every exported file (also run at interpreter exit)."""
        shutil.rmtree(self.export_dir, ignore_errors=True)

    def models(self, task: str = "caption") -> list[str]:
        """The models that caption (or, task="answer", answer questions: those that look at the photo
        first, so the app's default is never a question-only baseline whose map is uniform)."""
        from ..engine.checkpoints import available, shipped
        names = shipped(self.captioner.checkpoint_dir, task=task)
        if task != "answer":
            return names
        found = available(self.captioner.checkpoint_dir, task=task)
        return sorted(names, key=lambda name: _look(found[name]) == "none")

    def trained_on(self, task: str = "caption") -> str:
        """What the models of `task` have read, in one line (`trained_on_line`), from their checkpoints."""
        from ..engine.checkpoints import available
        return trained_on_line({name: _trained_on(path) for name, path in
                                available(self.captioner.checkpoint_dir, task=task).items()})

    def look(self, name: str) -> str:
        """How a question answering model reads the photo (its hparams' `look`, models/vqa.py):
        "attention" (a map per question), "mean" (every region alike) or "none" (the question only)."""
        from ..engine.checkpoints import available
        return _look(available(self.captioner.checkpoint_dir, task="answer").get(name))

    def decode(self, photo: Photo, model: str, settings: DecodeSettings, prefix: list[int] | None = None,
               required: tuple | None = None, question: str | None = None, avoid: tuple = ()) -> list[AttentionTrace]:
        """The traces of a decode, cached; `required`: ((words, source), ...) the caption must include;
        `avoid`: words it must not say; `question`: a question answering model's question (the traces are answers)."""
        if avoid:   # words ruled out by the detector: guided decoding's settings (no trigram twice)
            from ..analysis.guide import guided_settings
            settings = guided_settings(settings)
        key = (photo_key(photo), model, settings, tuple(prefix or ()), required, question, avoid)
        with self._lock:
            if key in self._decodes:
                self._decodes.move_to_end(key)
                return self._decodes[key]
            traces = self.captioner.caption([photo], model, settings, None if prefix is None else [prefix],
                                            constraints=None if required is None else [[(list(w), s) for w, s in required]],
                                            questions=None if question is None else [question],
                                            avoid=[list(avoid)] if avoid else None)[0]
            self._decodes[key] = traces
            while len(self._decodes) > 1 and (len(self._decodes) > self.max_decodes or self.decode_bytes() > self.max_decode_bytes):
                self._decodes.popitem(last=False)
            return traces

    def force(self, photo: Photo, model: str, caption: str, seed: int = 0) -> AttentionTrace:
        settings = DecodeSettings(strategy="forced", seed=seed)
        return self.decode(photo, model, settings, self.captioner.forced_ids(model, caption))[0]

    # --- exploring -------------------------------------------------------------------------
    def warm_up(self, photo: Photo | None = None) -> list[str]:
        """Load every model and caption a small photo with each once, behind the page, so the first
        caption a person asks for is as fast as the next (weights read, torch's kernels warm, the
        reference photos of the "guessed" verdict read). A model
        that fails here is left for its first click to say why; returns the models warmed."""
        photo = photo or Photo(np.full((64, 64, 3), 128, np.uint8), 64, 64, "warm-up")
        warmed = []
        for name in self.models():
            try:
                self.decode(photo, name, DecodeSettings())
                if self.reference_photos is not None:   # the "guessed" verdict's photos, read once per model
                    self.reference_photos.inputs(self.captioner, self.captioner.model(name))
            except Exception:   # noqa: BLE001 - its first real use reports it, in the page
                continue
            warmed.append(name)
        return warmed

    def explore(self, photo_source, model: str, settings: DecodeSettings, required: tuple | None = None,
                name_detected: bool = False, rule_out: bool = False) -> Exploration:
        """A new Exploration of a photo (a file, opened once: `open_photo`) with a model's decode;
        guided by the detector (`guidance`): `name_detected` requires its top classes besides the
        `required` words, `rule_out` keeps the words of what it does not see out."""
        opened = None if isinstance(photo_source, Photo) else self.open_photo(photo_source)
        photo = photo_source if opened is None else opened.photo
        avoid, note = (), None
        if name_detected or rule_out:
            from ..analysis.guide import overruled_note, user_wins
            found, unseen = self.guidance(photo, model)
            if rule_out:   # the user's own words are never ruled out
                kept, overruled = user_wins(list(unseen), list(required or ()))
                avoid, note = tuple(kept), overruled_note(overruled) or None
            required = (required or ()) + found if name_detected and found else required
        shown = {} if opened is None else {"display": opened.display, "display_key": opened.key}
        traces = self.decode(photo, model, settings, None, required, avoid=avoid)
        for trace in traces:   # the same decode key, the same note: safe on the cached traces
            trace.guidance = note
        return Exploration(photo, model, settings, traces, required=required, avoid=avoid, **shown)

    def detections(self, photo: Photo):
        """The detector's regions of a photo, once per photo (guidance and the "not seen" marks)."""
        return self._once(self._detections, ("detections", photo_key(photo)),
                          lambda: self.captioner.vision.detector.detect(photo.rgb))

    def guidance(self, photo: Photo, model: str) -> tuple[tuple, tuple]:
        """What the detector says a caption of the photo must and must not name (analysis/guide.py):
        (((words, "detector"), ...) of its top classes the model can say, the words to avoid)."""
        from ..analysis.guide import guidance
        found, unseen = guidance(self.captioner.model(model).vocab, self.detections(photo))
        return tuple((tuple(words), source) for words, source in found), tuple(unseen)

    def ask(self, photo_source, model: str, question: str) -> Exploration:
        """A new Exploration whose trace is a question answering model's answer (one word, then
        <end>): its map is the one the answer was read from, its next words the other answers."""
        opened = self.open_photo(photo_source) if not isinstance(photo_source, Photo) else None
        photo = photo_source if opened is None else opened.photo
        settings = DecodeSettings(strategy="greedy", max_len=ANSWER_TOKENS)
        return Exploration(photo, model, settings, self.decode(photo, model, settings, question=question),
                           **({} if opened is None else {"display": opened.display, "display_key": opened.key}))

    # --- a photo before its caption --------------------------------------------------------
    def open_photo(self, path: str, keep: int = 8) -> OpenedPhoto:
        """The photo file decoded once (kept by path, size and time), its display copy, and that copy
        held for the page under its key: a photo is opened when chosen, so Caption does not wait for it."""
        if not os.path.isfile(path):
            raise ImageError(f"{os.path.basename(path)}: no such file")
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._opened:
                self._opened.move_to_end(key)
                return self._opened[key]
        photo = load_photo(path)
        display = display_copy(photo)
        opened = OpenedPhoto(photo, display, self.hold_display(display))
        with self._lock:
            self._opened[key] = opened
            while len(self._opened) > keep:
                self._opened.popitem(last=False)
        return opened

    def prepare(self, path: str, model: str) -> str:
        """Open a chosen photo and compute the features `model` reads from it, before Caption is
        clicked (a person's pause hides the encoder, and the detector of region models); returns the
        key the page fetches the display copy by (`view_photo`), so it is decoded there before the
        caption arrives too."""
        opened = self.open_photo(path)
        if model:
            self.captioner.inputs(self.captioner.model(model), [opened.photo])
        return opened.key

    def hold_display(self, display: np.ndarray, keep: int = 16) -> str:
        """Keep a display copy as the JPEG the page gets (`view_photo`); returns its key (its content's digest)."""
        key = hashlib.sha1(repr(display.shape).encode() + np.ascontiguousarray(display).tobytes()).hexdigest()[:24]
        with self._lock:
            if key in self._displays:
                self._displays.move_to_end(key)
                return key
        data = "data:image/jpeg;base64," + base64.b64encode(jpeg(display, quality=85)).decode()
        with self._lock:
            self._displays[key] = data
            while len(self._displays) > keep:
                self._displays.popitem(last=False)
        return key

    def view_photo(self, key: str) -> str | None:
        """The display copy named `key` as a JPEG data URI, for the page (None: not held any more)."""
        with self._lock:
            return self._displays.get(str(key))

    def branch(self, ex: Exploration, step: int, word: str) -> Exploration:
        """Replace the token at `step` by `word` (one of its alternatives as shown, or a token of the
        vocabulary) and let the model continue from there."""
        vocab = self.captioner.model(ex.model).vocab
        s = ex.trace.steps[step]
        shown = [w for w, _ in s.alternatives]
        token = s.alternative_ids[shown.index(word)] if word in shown and s.alternative_ids else \
            vocab.index.get(word, vocab.unk)
        prefix = ex.trace.token_ids[:step] + [token]
        if token == vocab.end:   # the caption ends here: scored as it stands, whatever it was to include
            settings = replace(ex.settings, strategy="forced")
            beams = self.decode(ex.photo, ex.model, settings, prefix, question=ex.trace.question)
        else:                    # the model goes on, still to include the words it must
            beams = self.decode(ex.photo, ex.model, ex.settings, prefix, ex.required, ex.trace.question, ex.avoid)
        return replace(ex, beams=beams, beam=0, step=step, prefixes=ex.prefixes + [prefix])

    def unbranch(self, ex: Exploration) -> Exploration:
        """Back one branch (the memoised decodes make this instant)."""
        prefixes = ex.prefixes[:-1]
        beams = self.decode(ex.photo, ex.model, ex.settings, prefixes[-1] if prefixes else None, ex.required,
                            ex.trace.question, ex.avoid)
        return replace(ex, beams=beams, beam=0, step=min(ex.step, len(beams[0].steps) - 1), prefixes=prefixes)

    def reset(self, ex: Exploration) -> Exploration:
        return replace(ex, beams=self.decode(ex.photo, ex.model, ex.settings, None, ex.required,
                                             ex.trace.question, ex.avoid), beam=0, step=0, prefixes=[])

    # --- explaining ----------------------------------------------------------------------------
    def explain(self, ex: Exploration, method: str) -> Explanation:
        """`method`'s maps for every word of the shown caption, computed once per photo, model and
        caption (an LRU shared by sessions), kept on the Exploration so stepping only draws."""
        key = (*ex.key, method)
        found = self._once(self._explanations, key, lambda: explain(self.captioner, ex.photo, ex.model, ex.tokens,
                                                                   (method,), pipe=self.pipe(ex)))
        ex.explained[(method, ex.tokens)] = found
        return found

    def _once(self, cache: OrderedDict, key: tuple, compute):
        """cache[key], computed once however many sessions ask at the same time (the others wait for
        it), and OUTSIDE the Studio's lock: an occlusion run takes seconds, and other sessions'
        captions must not wait for it (the detector it reruns locks itself, vision/regions.py)."""
        with self._lock:
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in cache:
                    return cache[key]
            try:
                value = compute()
            except BaseException:
                with self._lock:
                    if self._computing.get(key) is gate:
                        del self._computing[key]
                raise
            with self._lock:
                cache[key] = value
                if self._computing.get(key) is gate:
                    del self._computing[key]
                while len(cache) > self.max_decodes:
                    cache.popitem(last=False)
            return value

    def pipe(self, ex: Exploration) -> Pipeline:
        """The photo-space pipeline of the shown caption (its features and blurred copy), shared by
        its explanations, deletion curves and visual dependence."""
        with self._lock:
            return self._pipe_locked(ex)

    def _pipe_locked(self, ex: Exploration, keep: int = 8) -> Pipeline:
        key = ex.key
        if key not in self._pipes:
            self._pipes[key] = Pipeline(self.captioner, ex.photo, ex.model, ex.tokens, question=ex.trace.question)
            while len(self._pipes) > keep:
                self._pipes.pop(next(iter(self._pipes)))
        return self._pipes[key]

    def trust(self, ex: Exploration, report=None) -> tuple[dict[str, Explanation], dict[str, Deletion]]:
        """Every method's maps of the shown caption and the selected word's pixel-space deletion
        curves under each, under both imputers (the reports' two-imputer rule; one batch of photos
        each), cached per photo, model, caption, word and imputer. `report(done, total, what)` hears
        of each part as it starts (the app's progress bar: a minute's work, method by method)."""
        methods = self.methods(ex.model)
        total, report = len(methods) + len(IMPUTERS), report or (lambda done, total, what: None)
        found = {}
        for i, m in enumerate(methods):
            report(i, total, f"map {i + 1} of {len(methods)}: {m}")
            found[m] = self.explain(ex, m)
        maps, curves = {m: e.maps[m] for m, e in found.items()}, {}
        for j, imp in enumerate(IMPUTERS):
            report(len(methods) + j, total, f"the word's deletion curves, hidden by {imp}")
            curves[imp] = self._once(self._deletions, (*ex.key, ex.step, imp),
                                     lambda imp=imp: deletion(self.pipe(ex), maps, steps=[ex.step], imputer=imp))
        return found, curves

    def methods(self, model: str) -> tuple[str, ...]:
        return available_methods(self.captioner, model)

    def visual_dependence(self, ex: Exploration) -> np.ndarray | None:
        """Each word's visual dependence for the shown caption: the larger log-prob drop of the photo
        blurred away and of the photo removed (`seen_dependence`; two extra pipeline runs); None for
        models that do not read our encoder."""
        if ex.tokens not in ex.dependence:
            if self.methods(ex.model) == ("attention",):
                return None
            key = ex.key
            ex.dependence[ex.tokens] = self._once(self._dependences, key, lambda: seen_dependence(self.pipe(ex)))
        return ex.dependence[ex.tokens]

    def unseen(self, ex: Exploration) -> dict[int, str]:
        """The caption's object words whose class the detector does not find on the photo: word index ->
        why, in a line (`why_unsupported`: said from the words before it, looked at another object, or
        at nothing found), once per caption."""
        if ex.tokens not in ex.unseen:
            from ..analysis.grounding import trace_units, word_class
            from ..analysis.hallucination import why_unsupported
            trace, regions, guessed = ex.trace, self.detections(ex.photo), ex.guessed.get(ex.tokens)
            units = trace_units(trace)
            found = {}
            for i, word in enumerate(trace.word_spans):
                why = why_unsupported(word.text, trace.steps[word.first].attention, units, regions,
                                      None if guessed is None else bool(guessed[word.first]))
                if why:
                    found[i] = f"{word.text}: the detector finds no {word_class(word.text)} here; {why}"
            ex.unseen[ex.tokens] = found
        return ex.unseen[ex.tokens]

    def guessed(self, ex: Exploration) -> np.ndarray | None:
        """Per step: would the model have said this word of most of the reference photos, after the
        same words (language_prior.py)? None, not measured, without --data's dev-select photos or for
        models that do not read our encoder."""
        if self.reference_photos is None or self.methods(ex.model) == ("attention",):
            return None
        if ex.tokens not in ex.guessed:
            ex.guessed[ex.tokens] = caption_prior(self.pipe(ex), self.reference_photos).said_of_most
        return ex.guessed[ex.tokens]

    def compare_methods(self, ex: Exploration) -> list[AttentionTrace]:
        """Compare's "methods" mode: the Exploration's caption drawn with each of the model's methods' maps."""
        out = []
        for m in self.methods(ex.model):
            out.append(ex.trace if m == "attention" else explained_trace(ex.trace, self.explain(ex, m), m))
        return out

    def compare_guidance(self, ex: Exploration) -> list[AttentionTrace]:
        """Compare's guidance mode: Explore's model and settings three ways on the same photo, as Explore
        decodes them with its switches: plain, with what the detector does not see ruled out, and also
        made to name its top classes. Each trace is named by what was asked of it (the words of its line)."""
        out, shown = [], []
        for name, name_detected, rule_out in (("plain", False, False), ("ruled out", False, True), ("guided", True, True)):
            one = self.explore(ex.photo, ex.model, ex.settings, name_detected=name_detected, rule_out=rule_out)
            asked = " · ".join(guidance_parts(one.required, one.avoid))
            why = same_as_note(shown, one)
            out.append(replace(one.trace, model=f"{ex.model} · {name}" + (f" ({asked})" if asked else "") + why))
            shown.append((name, one))
        return out

    # --- comparing ---------------------------------------------------------------------------
    def compare(self, photo: Photo, models: list[str], settings: DecodeSettings, same_caption: str | None = None
                ) -> list[AttentionTrace]:
        """Each model's own caption, or every model forced through the same caption."""
        if same_caption:
            return [self.force(photo, m, same_caption, settings.seed) for m in models]
        return [self.decode(photo, m, settings)[0] for m in models]

    # --- images for the UI ----------------------------------------------------------------------
    @property
    def view_dir(self) -> str:
        """Where rendered views live; the app serves this folder as it is (no copy per reply), so the
        browser can fetch every word's view by a name it was given in advance (`view_paths`)."""
        return os.path.join(self.export_dir, "views")

    def _write(self, name: str, data: bytes, max_files: int = 4000) -> str:
        """Write a file into view_dir atomically. Gradio's own array-to-file step rewrites the same
        hashed file in place, so two sessions showing the same picture could serve each other
        half-written files; a renamed-into-place file never is. Only the newest files are kept."""
        folder = self.view_dir
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            files = os.listdir(folder)
            if len(files) > max_files:
                for old in sorted(files, key=lambda n: os.path.getmtime(os.path.join(folder, n)))[: max_files // 5]:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(folder, old))
        return path

    def view_path(self, ex: Exploration, style: Style, t: int) -> str:
        """Where word t's overlay of `ex`'s trace in `style` is, or will be once drawn: named by what
        it shows, so it is known before it is drawn and shared by sessions."""
        key = hashlib.sha1(repr((view_key(ex), t, style)).encode()).hexdigest()
        return os.path.join(self.view_dir, f"overlay-{key}.jpg")

    def view(self, ex: Exploration, style: Style, t: int) -> str:
        """The file of word t's overlay drawn by the server (the steered view), drawn once."""
        path = self.view_path(ex, style, t)
        if not os.path.exists(path):
            self._write(os.path.basename(path), jpeg(overlay(replace(ex, beams=[ex.trace], beam=0), style, t)))
        return path

    def page_view(self, ex: Exploration, style: Style, title: str) -> dict | None:
        """The page view's payload of `ex` (page_view.view_payload), or None when the page already
        holds this one (same trace, map and head): stepping and restyling never resend it."""
        head = head_index(style.head)
        key = view_key(ex).hex() + (f"-h{head}" if head else "") + "-" + title
        if ex.sent_view == key:
            return None
        ex.sent_view = key
        if ex.display_key is None or ex.display_key not in self._displays:
            ex.display_key = self.hold_display(ex.display)
        return view_payload(ex, title, head, key, self.unseen(ex))

    # --- exporting ---------------------------------------------------------------------------
    def export_path(self, ex: Exploration, suffix: str) -> str:
        """A fresh file inside export_dir; the name keeps only safe characters of the photo's name,
        and only the newest `max_exports` exports are kept."""
        os.makedirs(self.export_dir, exist_ok=True)
        folders = sorted((os.path.join(self.export_dir, d) for d in os.listdir(self.export_dir) if d != "views"),
                         key=os.path.getmtime)
        for old in folders[: max(0, len(folders) - self.max_exports + 1)]:
            shutil.rmtree(old, ignore_errors=True)
        folder = tempfile.mkdtemp(dir=self.export_dir)
        base = os.path.basename((ex.photo.name or "photo").replace("\\", "/"))
        stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in os.path.splitext(base)[0]).strip("_")
        model = "".join(c if c.isalnum() or c in "-_" else "_" for c in os.path.basename(ex.model))
        return os.path.join(folder, f"{stem[:40] or 'photo'}_{model}{suffix}")

    def export_json(self, ex: Exploration) -> str:
        path = self.export_path(ex, ".json")
        with open(path, "w") as f:
            json.dump(trace_json(ex), f, indent=1)
        return path

    def export_gif(self, ex: Exploration, style: Style) -> str:
        return render_gif(ex.photo.rgb, ex.shown, self.export_path(ex, ".gif"), **style.as_kwargs())

    def export_png(self, ex: Exploration, image: np.ndarray, what: str) -> str:
        from PIL import Image
        path = self.export_path(ex, f"_{what}.png")
        Image.fromarray(image).save(path)
        return path


    triage_dir = TRIAGE_DIR

    def triage_runs(self) -> list[str]:
        return list_runs(self.triage_dir)

    def triage_rows(self, name: str) -> list[dict]:
        return read_run(self.triage_dir, name)

    def references_for(self, photo_name: str) -> list[str]:
        """The dataset's references for a photo of that file name (none when unknown)."""
        return self.references_by_name.get(os.path.basename(photo_name or ""), [])

    def score(self, ex: Exploration, references: list[str]) -> dict:
        corpus = None if self.dataset is None else self.dataset.captions
        return caption_scores(ex.trace.caption, references, corpus)

    def compare_caption(self, ex: Exploration, models: list[str], text: str) -> str:
        """The caption Compare forces through every model: the one typed, else the first model's own."""
        return text.strip() or self.decode(ex.photo, models[0], ex.settings)[0].caption


# --- views (pure functions of an Exploration) ------------------------------------------------

def trace_json(ex: Exploration) -> dict:
    """The JSON trace of `ex` (as `caption --json`), with every explanation computed for its caption
    under each step's "explain" and the method the views show under "shown"."""
    obj = ex.trace.to_json()
    obj["shown"] = ex.method
    for (method, tokens), found in ex.explained.items():
        if tokens == ex.tokens:
            for step, grid in zip(obj["steps"], found.maps[method]):
                step.setdefault("explain", {})[method] = np.round(grid, 6).tolist()
    return obj


def packed(a) -> dict:
    """A numeric array for the page as one base64 string of float32s (page_view.js `unpacked`). As
    JSON lists, the page's Gradio deep-copies the value number by number on each status change of
    the event: about 140 ms of its thread per caption, measured in chromium."""
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "f32": base64.b64encode(a.tobytes()).decode()}


def unpacked(value):
    """`packed`'s array back, or `value` itself when it is not packed (the page does the same)."""
    if isinstance(value, dict) and "f32" in value:
        return np.frombuffer(base64.b64decode(value["f32"]), "<f4").reshape(value["shape"])
    return value


def view_payload(ex: Exploration, title: str, head: tuple[int, int] | None, key: str,
                 unseen: dict[int, str] | None = None) -> dict:
    """What the page needs to draw every step of `ex`'s shown trace (attention, or the explanation
    it shows) on `ex.display`: a few kilobytes per word. The photo is named, not sent: the page
    fetches it once by that name (Studio.view_photo), usually when it was chosen. `head` (layer,
    head): that head's maps instead of the summary. `key` names the content, so the page does not
    redo a view it holds. `unseen`: the object words the detector does not find, and why (`Studio.unseen`)."""
    trace, unseen = ex.shown, unseen or {}
    h, w = ex.display.shape[:2]
    out = {"key": key, "title": title, "width": w, "height": h, "photo": ex.display_key,
           "kind": "regions" if trace.attends_to == AttendsTo.REGIONS else "grid", "step": ex.step,
           "first": first_steps(trace), "word_firsts": [w.first for w in trace.word_spans],
           "words": [w.text for w in trace.word_spans], "unseen": {str(i): why for i, why in unseen.items()},
           "tokens": [t.strip() for t in shown_tokens(trace)]}
    if out["kind"] == "grid":
        side = trace.grid_side
        maps = [s.heads[head] if head is not None and s.heads is not None else s.attention for s in trace.steps]
        out.update(side=side, maps=packed(maps), paper=packed(paper_operator(side)),
                   cells=packed(cell_boxes(trace.width, trace.height, side) * np.array([w / trace.width, h / trace.height] * 2)),
                   samples=[s.sample for s in trace.steps],
                   draws=[draw_cells(s.attention, HARD_DRAWS, seed=t) if s.sample is not None else None
                          for t, s in enumerate(trace.steps)])
    else:
        boxes = trace.boxes_pixels() * np.array([w / trace.width, h / trace.height] * 2)
        out.update(boxes=packed(boxes), labels=list(trace.region_labels),
                   context=[lab in CONTEXT for lab in trace.region_labels],
                   scores=packed(trace.region_scores), maps=packed([s.attention for s in trace.steps]))
    return out


def heads_payload(ex: Exploration) -> dict | None:
    """Every layer's and head's map (layers x heads x cells) for the page's heads grid, drawn there
    over the view it holds (`key`): every word's when they are few, so the grid follows the word with
    no request, else the selected word's (a BLIP trace's heads are megabytes). None: no heads."""
    trace = ex.trace
    if not trace.steps or trace.steps[0].heads is None:
        return None
    every = trace.steps[0].heads.size * len(trace.steps) <= HEADS_SENT
    layers, heads = trace.steps[0].heads.shape[:2]
    return {"key": ex.sent_view, "side": trace.grid_side, "layers": layers, "heads": heads,
            "steps": {str(t): packed(trace.steps[t].heads) for t in (range(ex.n_steps) if every else [ex.step])}}


def overlay(ex: Exploration, style: Style, step: int | None = None) -> np.ndarray:
    t = ex.step if step is None else step
    trace = ex.shown
    img = render_step(ex.display, trace, t, show_alpha=style.show_alpha, **style.as_kwargs())
    s = trace.steps[t]
    if s.sample is not None and style.hard_samples > 1:
        cells = draw_cells(s.attention, style.hard_samples, seed=t)
        img = render_cells(img, cells, trace.width, trace.height, colour=(255, 150, 0), grid=trace.grid_side)
        img = render_cells(img, [s.sample], trace.width, trace.height, grid=trace.grid_side)
    return img


def draw_cells(alpha: np.ndarray, n: int, seed: int = 0) -> list[int]:
    """Extra draws from a step's alpha, to show how spread the hard-attention choice was."""
    rng = np.random.default_rng(seed)
    p = np.asarray(alpha, dtype=np.float64)
    return rng.choice(len(p), size=n, p=p / p.sum()).tolist()


def strip(ex: Exploration, style: Style) -> np.ndarray:
    return render_strip(ex.display, ex.shown, **style.as_kwargs())


def all_heads(ex: Exploration, style: Style) -> np.ndarray:
    """Every layer's and head's map for the current word (multi-head models)."""
    return render_heads(ex.display, ex.trace, ex.step, **style.as_kwargs())


def figure(ex: Exploration, traces: list[AttentionTrace], style: Style) -> np.ndarray:
    """The soft-vs-hard figure of Compare's traces (the same caption through each model)."""
    return render_figure(ex.display, traces, **style.as_kwargs())


def caption_tokens(ex: Exploration) -> list[tuple[str, str | None]]:
    """HighlightedText value: every step's token (a word's tokens side by side), the branched ones
    and those a "must mention" constraint required marked, and, once measured, the words the photo barely mattered to: "guessed", or "said, not
    seen" for a word naming an object (every token of the word; measured at its first token). The
    page marks the selected word itself (page_view.js), so stepping never resends the caption. A final
    "<end>" is no word to read: the trace keeps it (its map is a view), the caption omits it."""
    trace = ex.trace
    n_forced = len(ex.prefixes[-1]) if ex.prefixes else 0
    guessed, unseen = ex.guessed.get(ex.tokens), ex.unseen.get(ex.tokens, {})
    firsts = [w.first for w in trace.word_spans]
    out = []
    for t, shown in enumerate(shown_tokens(trace)[:len(trace.steps) - ended(trace)]):
        word = trace.word_at(t)
        label = "branched" if t < n_forced else "required" if trace.steps[t].required else None
        if label is None and firsts.index(word.first) in unseen:
            label = "not seen"
        elif label is None and guessed is not None and word.first < len(guessed) and word.text != "<end>":
            label = verdict(word.text, bool(guessed[word.first]))
        out.append((shown, label))
    return out


def ended(trace: AttentionTrace) -> bool:
    """Does the trace's last step say "<end>"?"""
    return bool(trace.steps) and trace.word_at(len(trace.steps) - 1).text == "<end>"


def shown_tokens(trace: AttentionTrace) -> list[str]:
    """Each step as the caption shows it, with the space that follows it: words, or for sub-word
    models (hf:) the tokens' own text, so a word's tokens stand together ("cup" "cake " reads cupcake)."""
    if trace.pieces is None:
        return [s.word + " " for s in trace.steps]
    pieces = [p if p.strip() else s.word for p, s in zip(trace.pieces, trace.steps)]   # "<end>" has no text
    nxt = trace.pieces[1:] + [" "]
    return [p.strip() + (" " if not n or n[0].isspace() or not n.strip() else "") for p, n in zip(pieces, nxt)]


def first_steps(trace: AttentionTrace) -> list[int]:
    """For each step, its word's first step: where a click on the word goes."""
    return [trace.word_at(t).first for t in range(len(trace.steps))]


def guidance_parts(required: tuple | None, avoid: tuple) -> list[str]:
    """What the detector asked of a caption (an Exploration's `required` and `avoid`), part by part:
    the classes it had to name, the words it could not say (none when it asked nothing)."""
    from ..analysis.grounding import word_class
    from ..analysis.guide import UNKNOWN
    must = sorted({word_class(words[0]) or words[0] for words, source in required or () if source == "detector"})
    never = sorted({word_class(w) for w in avoid if w != UNKNOWN} - {None})
    shown = [c for c in ("person", "dog") if c in never] or never[:2]   # the prior's favourites first
    rest = f" or {len(never) - len(shown)} other classes" if len(never) > len(shown) else ""
    return ([f"must name {', '.join(must)}"] if must else []) + \
        ([f"never {', '.join(shown)}{rest} (the detector sees none)"] if never else []) + \
        (["never `<unk>`"] if UNKNOWN in avoid else [])


def same_as_note(before: list[tuple[str, Exploration]], one: Exploration) -> str:
    """Why Compare's guidance column `one` says what an earlier column said (empty when it differs): ruling out
    changed nothing when the caption named nothing the detector misses; requiring changed nothing when the
    detector found no class sure enough to require (THRESHOLD) or the caption already named it."""
    from ..analysis.guide import THRESHOLD
    for name, other in reversed(before):
        if other.trace.words != one.trace.words:
            continue
        if name == "plain":
            return " — same as plain: it named nothing the detector does not see"
        required = [words for words, source in one.required or () if source == "detector"]
        return (f" — same as {name}: no class scored {THRESHOLD} or more, so nothing was required" if not required
                else f" — same as {name}: that caption already named what the detector required")
    return ""


def guidance_note(required: tuple | None, avoid: tuple, overruled: str | None = None) -> str:
    """`guidance_parts` in a line for Explore's status (empty when the detector asked nothing),
    with `overruled`, the trace's line on where the user's words won over the detector."""
    parts = guidance_parts(required, avoid)
    return " ".join(filter(None, ["Guided by the detector: " + " · ".join(parts) + "." if parts else "", overruled]))


SMALL_PHOTO, LARGE_PHOTO = 64, 20 * INPUT_SIZE   # px a side: a caption of a photo outside these is doubtful


def size_note(photo: Photo) -> str:
    """A line for the status when the photo's size makes its caption doubtful: every model reads
    a few hundred pixels a side, so a tiny photo is enlarged from a handful of pixels and a huge
    one shrunk until its details are gone."""
    size = f"{photo.width}×{photo.height} px"
    if min(photo.width, photo.height) < SMALL_PHOTO:
        return f" Note: the photo is only {size}: the model sees it enlarged, so the caption is a guess from a few pixels."
    if min(photo.width, photo.height) > LARGE_PHOTO:
        return f" Note: the photo is {size}: the model sees it shrunk to {INPUT_SIZE} px a side, so small details are lost."
    return ""


def beam_choices(ex: Exploration) -> list[str]:
    return [f"{i + 1}. {b.caption}  (score {b.score:.2f}{'' if b.finished else ', unfinished'})"
            for i, b in enumerate(ex.beams)]


def unit_at(ex: Exploration, x: float, y: float) -> int:
    """The cell (grid models) or the smallest region (region models) under view pixel (x, y)."""
    h, w = ex.display.shape[:2]
    ox, oy = x * ex.photo.width / w, y * ex.photo.height / h
    if ex.trace.attends_to == AttendsTo.GRID:
        return cell_at(ox, oy, ex.photo.width, ex.photo.height, ex.trace.grid_side)
    boxes = ex.trace.boxes_pixels()
    inside = [i for i, (x1, y1, x2, y2) in enumerate(boxes) if x1 <= ox <= x2 and y1 <= oy <= y2]
    return min(inside, key=lambda i: (boxes[i][2] - boxes[i][0]) * (boxes[i][3] - boxes[i][1]))


# --- lecture mode --------------------------------------------------------------------------------

def model_for_key(models: list[str], key: int) -> str:
    """The model that number key `key` (one of MODEL_KEYS) picks: the Model dropdown's entry of that rank."""
    if not 1 <= key <= len(models):
        raise ValueError(f"There is no model {key}: {len(models)} model(s) are available.")
    return models[key - 1]
