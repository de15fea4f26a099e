"""The one entry point the CLI, the app, diagnostics and benchmarks call: photo + model + settings -> traces.

It owns the loaded vision stack and decoders and a bounded cache of per-photo features, so
re-decoding a photo (another model, another setting, a branch) never re-runs the encoder.
Imported models may bring their own encoder (run here, cached the same way) or need features
precomputed elsewhere (`feature_files`, looked up by the photo's name).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import replace

import numpy as np
import torch

from . import checkpoints
from .constraints import Requirement, avoid_tokens, constraint_tokens
from .decoding import DecodeSettings, decode
from .device import pick_device
from .images import AttendsTo, Photo
from .trace import AttentionTrace, build_trace
from .vocab import tokenize
from .words import spelled
from .vision import FeatureSource, ImageFeatures, VisionStack
from .vision.carried import CarriedEncoder
from .vision.precomputed import FeatureFiles, FeaturesNotFound


class Captioner:
    """Shared by every caller so a photo is encoded once however many models, settings and branches view it."""

    def __init__(self, device: str | None = None, checkpoint_dir: str | None = None,
                 max_cached_photos: int = 64, feature_files: str | None = None):
        self.device = pick_device(device)
        self.checkpoint_dir = checkpoint_dir
        self.feature_files = FeatureFiles(feature_files) if feature_files else None
        self._vision: VisionStack | None = None
        self._carried: dict[str, CarriedEncoder] = {}
        self._models: dict[str, checkpoints.LoadedModel] = {}
        self._loading: dict[str, threading.Lock] = {}   # paths being loaded (`model`)
        self._features: OrderedDict[str, ImageFeatures] = OrderedDict()
        self.max_cached_photos = max_cached_photos
        self._lock = threading.RLock()   # the app calls in from several worker threads

    @property
    def vision(self) -> VisionStack:
        if self._vision is None:
            self._vision = VisionStack(self.device)
        return self._vision

    def model(self, name_or_path: str) -> checkpoints.LoadedModel:
        """The loaded model, loaded once; OUTSIDE the shared lock (a large model takes seconds to load,
        and other sessions' captions must not wait for it): callers asking for the same model wait
        for the first load instead of starting their own."""
        path = checkpoints.resolve(name_or_path, self.checkpoint_dir)
        with self._lock:
            if path in self._models:
                return self._models[path]
            gate = self._loading.setdefault(path, threading.Lock())
        with gate:
            with self._lock:
                if path in self._models:
                    return self._models[path]
            loaded = checkpoints.load(path, self.device)
            with self._lock:
                self._models[path] = loaded
                self._loading.pop(path, None)
            return loaded

    def features(self, photos: list[Photo], with_regions: bool = True) -> list[ImageFeatures]:
        """Features for each photo, computing the missing ones in one batch; LRU-bounded cache.

        Regions are detected only when asked for (region models), once per photo.
        """
        with self._lock:
            return self._features_locked(photos, with_regions)

    def _features_locked(self, photos: list[Photo], with_regions: bool) -> list[ImageFeatures]:
        out = self._cached(photos, "", lambda todo: self.vision.extract(todo, with_regions))
        for item, p in zip(out, photos):
            if with_regions and item.regions is None:
                item.regions = self.vision.detector.detect(p.rgb)
        return out

    def _cached(self, photos: list[Photo], source: str, compute) -> list[ImageFeatures]:
        """LRU of features per (source, photo); the missing photos are computed in one batch."""
        keys = [source + photo_key(p) for p in photos]
        todo = {k: p for k, p in zip(keys, photos) if k not in self._features}
        if todo:
            self._features.update(zip(todo, compute(list(todo.values()))))
        for k in keys:
            self._features.move_to_end(k)
        out = [self._features[k] for k in keys]
        while len(self._features) > self.max_cached_photos:
            self._features.popitem(last=False)
        return out

    def inputs(self, lm: checkpoints.LoadedModel, photos: list[Photo]) -> list[ImageFeatures]:
        """What this model looks at for each photo: our grid/regions, its own encoder's grid, or precomputed."""
        source = lm.vision_spec.source
        if source == FeatureSource.CARRIED:
            with self._lock:
                if lm.path not in self._carried:
                    self._carried[lm.path] = lm.image_encoder or \
                        CarriedEncoder(lm.vision_spec, lm.encoder_tensors, self.device)   # hf: models bring theirs
                encoder = self._carried[lm.path]
                return self._cached(photos, f"{lm.path}:",   # per model: same-spec encoders differ in weights
                                    lambda todo: [ImageFeatures(g) for g in encoder(todo)])
        if source == FeatureSource.PRECOMPUTED:
            return [self._precomputed(lm, p) for p in photos]
        return self.features(photos, with_regions=lm.attends_to == AttendsTo.REGIONS)

    def _precomputed(self, lm: checkpoints.LoadedModel, photo: Photo) -> ImageFeatures:
        spec = lm.vision_spec.details
        if self.feature_files is None:
            raise ValueError(f"{lm.name} runs on precomputed features ({spec.get('describe', spec.get('features'))}): "
                             "start with --features PATH (a .tsv, .hdf5 or folder of .npz)")
        try:
            item = self.feature_files.lookup(photo)
        except FeaturesNotFound as err:
            raise ValueError(f"{lm.name}: {err}") from None
        dim = (item.grid if item.regions is None else item.regions.features).shape[-1]
        if dim != spec.get("dim", dim):
            raise ValueError(f"{lm.name} reads {spec['dim']}-d features; those found for {photo.name} are {dim}-d")
        if (item.regions is None) != (lm.attends_to == AttendsTo.GRID):
            found = "regions" if item.regions is not None else \
                "a grid (region features need their boxes: <name>_box/<id>.npy next to <name>_att/)"
            raise ValueError(f"{lm.name} attends to {lm.attends_to}, but the features found for {photo.name} are {found}")
        return item

    def caption(self, photos: list[Photo], model: str, settings: DecodeSettings | None = None,
                prefixes: list[list[int]] | None = None, hidden: list[list[int]] | None = None,
                steer: tuple[int, list[np.ndarray]] | None = None, constraints: list[list[Requirement]] | None = None,
                need: int | None = None, questions: list[str] | None = None,
                avoid: list[list[str]] | None = None) -> list[list[AttentionTrace]]:
        """Decode every photo; per photo the traces best first (several for beam search).

        `prefixes` (token ids) force the start of each caption: branching from a chosen token.
        `hidden` (per photo, cell or region indices) are masked out of the model's view: occlusion.
        `steer` = (step t, per photo a map over its cells or regions summing to 1): at word t the
        model attends there instead of where it would look (viewer/steer.py); that step is marked.
        `constraints` (per photo, (words, source) pairs: any of the words must appear): constrained
        beam search (engine/constraints.py), `need` of them met; the steps of a required word say
        which source required it. `avoid` (per photo): words the caption must not complete ("<unk>":
        the unknown token). `questions` (per photo): a question answering model's prompts
        (`ask`); each trace is then an answer and names its question.
        """
        settings = settings or DecodeSettings()
        lm = self.model(model)
        feats = self.inputs(lm, photos)
        x, mask = lm.batch(feats, self.device)
        for i, idx in enumerate(hidden or []):
            mask[i, list(idx)] = False
        if not bool(mask.any(1).all()):
            raise ValueError("everything the model could look at is hidden")
        if steer is not None:
            sizes = [len(f.regions) if lm.attends_to == AttendsTo.REGIONS else x.shape[1] for f in feats]
            steer = (steer[0], _steer_maps(steer[1], sizes, x.shape[1]))
        tokens = None if constraints is None else \
            [[constraint_tokens(lm.vocab, words) for words, _ in per] for per in constraints]
        avoided = None if avoid is None else [avoid_tokens(lm.vocab, words) for words in avoid]
        prompt = None if questions is None else question_ids(lm, questions, self.device)
        if lm.model.answers and prompt is None:
            raise ValueError(f"{lm.name} answers questions: ask it one")
        hyps = decode(lm.model, x, mask, settings, lm.vocab, prefixes, steer, constraints=tokens, need=need, prompt=prompt,
                      avoid=avoided)
        traces = [[build_trace(h, lm.vocab, lm.name, lm.attends_to, p.width, p.height, p.name, f.regions)
                   for h in hs] for hs, p, f in zip(hyps, photos, feats)]
        for hs, q in zip(traces, questions or []):
            for trace in hs:
                trace.question = q
        for i, (hs, trs) in enumerate(zip(hyps, traces) if constraints is not None else ()):
            for h, trace in zip(hs, trs):
                for c, steps in h.required.items():
                    for t in steps:
                        trace.steps[t].required = constraints[i][c][1]
        if steer is not None:   # (a beam that ended before step t was never steered)
            for trace in (tr for hs in traces for tr in hs if steer[0] < len(tr.steps)):
                trace.steps[steer[0]].steered = True
        return traces

    def ask(self, photos: list[Photo], model: str, questions: list[str], top_k: int = 5,
            hidden: list[list[int]] | None = None) -> list[AttentionTrace]:
        """Answer one question per photo: a trace of the answer (one word from ours, a few tokens from an
        `hf:` BLIP) then <end>, its map the one the answer was read from, its alternatives the next best."""
        settings = DecodeSettings(strategy="greedy", max_len=ANSWER_TOKENS, top_k=top_k)
        return [hs[0] for hs in self.caption(photos, model, settings, hidden=hidden, questions=questions)]

    def forced_ids(self, model: str, caption: str) -> list[int]:
        """Caption text as the token ids forced decoding emits, <end> last (the one place text is tokenised)."""
        vocab = self.model(model).vocab
        return vocab.encode(caption) + [vocab.end]

    def force(self, photos: list[Photo], model: str, captions: list[str | list[int]], seed: int = 0,
              hidden: list[list[int]] | None = None, questions: list[str] | None = None) -> list[AttentionTrace]:
        """Score given captions with teacher forcing; the attention each model gives those exact words.
        A caption is text, or token ids ending with <end> (a trace's own `token_ids`: forced as they are);
        with `questions`, a question answering model's answers to them."""
        ids = [c if not isinstance(c, str) else self.forced_ids(model, c) for c in captions]
        settings = DecodeSettings(strategy="forced", seed=seed)
        traces = [hs[0] for hs in self.caption(photos, model, settings, ids, hidden, questions=questions)]
        for trace, c in zip(traces, captions):
            if isinstance(c, str):
                typed_words(trace, c)
        return traces


ANSWER_TOKENS = 10   # ours answer in one word and then end; a BLIP answer is a few tokens


def question_ids(lm: checkpoints.LoadedModel, questions: list[str], device) -> torch.Tensor:
    """Questions as the model's question vocabulary's ids, padded with 0: (n, longest)."""
    if not lm.model.answers:
        raise ValueError(f"{lm.name} captions; it answers no question (choose a question answering model)")
    if not all(any(c.isalnum() for c in q) for q in questions):   # "?!" asks nothing
        raise ValueError("type a question (a few words)")
    return lm.question_ids(questions).to(device)


def typed_words(trace: AttentionTrace, caption: str) -> None:
    """A whole-word model forced through typed text: a word its vocabulary lacks (<unk>) keeps its
    typed text in the word layer, so boxes and grounding still find it (and know it is unknown)."""
    typed = tokenize(caption)
    if trace.text is None and len(typed) == sum(s.word != "<end>" for s in trace.steps):   # a step per typed word
        trace.word_spans = [w if w.known else replace(w, text=spelled(typed[w.first:w.last + 1]))
                            for w in trace.word_spans]


def _steer_maps(maps: list[np.ndarray], sizes: list[int], k: int) -> torch.Tensor:
    """One (n_photos, k) tensor of steering maps, zero on the padding of a batch of region photos."""
    out = torch.zeros(len(maps), k)
    for i, (m, n) in enumerate(zip(maps, sizes)):
        m = np.asarray(m, dtype=np.float32)
        if m.shape != (n,) or (m < 0).any() or abs(float(m.sum()) - 1.0) > 1e-3:
            raise ValueError(f"a steering map needs {n} weights >= 0 summing to 1 (one per cell or region)")
        out[i, :n] = torch.from_numpy(m)
    return out


def photo_key(photo: Photo) -> str:
    """Content hash of a photo: the cache key for its features and decodes."""
    h = hashlib.sha1(photo.rgb.tobytes())
    h.update(str(photo.rgb.shape).encode())
    return h.hexdigest()
