"""AttentionTrace: the words of one decode, each with the attention that produced it.

Everything the viewer shows is read from a trace; it round-trips through JSON (the
`caption --json` schema in the README) so a view can be reproduced from the command line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .images import AttendsTo, GRID, grid_side, to_pixels
from .words import WORD_MAP, Word, first_step_words, split_words, spelled, step_index


def entropy(attention: np.ndarray) -> float:
    """Shannon entropy (nats) of an attention distribution: how spread out the look is."""
    p = np.asarray(attention, np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())

@dataclass
class TraceStep:
    word: str
    token: int
    logprob: float
    attention: np.ndarray                   # (K,) sums to 1: 196 grid cells (row-major) or K regions
    alternatives: list[tuple[str, float]]   # top next words with their probabilities, best first
    beta: float | None = None               # SAT's gating scalar
    sample: int | None = None               # hard attention: the attended cell, row-major index
    heads: np.ndarray | None = None         # (layers, heads, K) multi-head models; `attention` is their stated summary
    steered: bool = False                   # the model was made to attend `attention` here (steering)
    outside: float | None = None            # weight outside the map, before `attention` was renormalised (a ViT's class token)
    alternative_ids: list[int] = field(default_factory=list)   # the token id of each alternative (branching)
    required: str | None = None             # a constraint required this step's word: its source ("user", "detector")
    copy: float | None = None               # p(copy): the weight of words copied from the attended regions' labels

    @property
    def entropy(self) -> float:
        return entropy(self.attention)


HEADS_SUMMARY = "the last layer's attention, mean over its heads (every layer and head: 'heads')"
HEADS_OUTSIDE = ("; over the image patches only, renormalised to sum to 1 (the class token's weight, left out of "
                 "the map, is each step's 'class_token')")


@dataclass
class AttentionTrace:
    model: str
    attends_to: AttendsTo
    steps: list[TraceStep]
    width: int                               # original photo size, for mapping boxes and cells
    height: int
    image: str = ""
    score: float = 0.0
    finished: bool = True
    region_boxes: np.ndarray | None = None   # (K, 4) normalised on the model input
    region_labels: list[str] = field(default_factory=list)
    region_scores: np.ndarray | None = None
    text: str | None = None                  # sub-word models (hf:): the caption as the tokenizer spells it
    pieces: list[str] | None = None          # ... and each step's share of it (" cup", "cake": one word, two steps)
    word_spans: list[Word] | None = None     # the word layer (words.py); default: every step is a word
    question: str | None = None              # a question answering model's prompt: the trace is its answer
    guidance: str | None = None              # where the user's words and the detector's guidance disagreed: who won

    def __post_init__(self):
        self.attends_to = AttendsTo(self.attends_to)   # refuses anything but "grid" / "regions"
        if self.word_spans is None:
            tokens = [s.word for s in self.steps]
            self.word_spans = split_words(tokens, tokens, None, [w in ("<end>", "<start>") for w in tokens],
                                          [w == "<unk>" for w in tokens])
        self._word_of = step_index(self.word_spans, len(self.steps))

    @property
    def words(self) -> list[str]:
        """The caption's words as text (<end> left out): what grounding, boxes and the app read."""
        return [w.text for w in self.word_spans if w.text != "<end>"]

    @property
    def nbytes(self) -> int:
        """The arrays' memory (maps, heads, boxes): what the app's trace cache is bounded by."""
        arrays = [a for s in self.steps for a in (s.attention, s.heads) if a is not None]
        arrays += [a for a in (self.region_boxes, self.region_scores) if a is not None]
        return sum(int(np.asarray(a).nbytes) for a in arrays)

    @property
    def token_ids(self) -> list[int]:
        """The steps' token ids: what forcing the same caption again takes (nothing re-tokenises text)."""
        return [s.token for s in self.steps]

    def word_at(self, t: int) -> Word:
        """The word step t belongs to."""
        return self.word_spans[self._word_of[t]]

    def step_words(self) -> list[str]:
        """Per step, its word's text at the word's first step, "" at the others (words.first_step_words)."""
        return first_step_words(self.word_spans, len(self.steps))

    @property
    def caption(self) -> str:
        """What the model's tokens spell ("man's" and "t-shirt" joined as the word layer joins them; a
        forced word the vocabulary lacks reads <unk>)."""
        if self.text is not None:
            return self.text
        return spelled([s.word for s in self.steps if s.word != "<end>"])

    @property
    def grid_side(self) -> int:
        """Cells per side of a grid model's map: 14 for ours (7 for a ResNet-152 model imported at 224 px)."""
        return grid_side(len(self.steps[0].attention)) if self.steps else GRID

    def grid(self, t: int) -> np.ndarray:
        """The side x side attention map of step t."""
        return self.steps[t].attention.reshape(self.grid_side, self.grid_side)

    def coverage(self, t: int) -> np.ndarray:
        """Attention summed over steps 0..t (the doubly stochastic regulariser's quantity)."""
        return np.sum([s.attention for s in self.steps[: t + 1]], axis=0)

    def boxes_pixels(self) -> np.ndarray:
        return to_pixels(self.region_boxes, self.width, self.height)

    def to_json(self) -> dict:
        steps = []
        for s in self.steps:
            item = {"word": s.word, "id": s.token, "word_index": self._word_of[len(steps)],
                    "logprob": round(s.logprob, 6),
                    "alternatives": [{"word": w, "prob": round(p, 6), **({"id": i} if i is not None else {})}
                                     for (w, p), i in zip(s.alternatives, _padded(s.alternative_ids, s.alternatives))]}
            if self.attends_to == AttendsTo.GRID:
                item["grid"] = np.round(s.attention.reshape(self.grid_side, self.grid_side), 6).tolist()
            else:
                item["regions"] = [{"box": [round(v, 2) for v in box], "label": label, "score": round(float(sc), 4),
                                    "weight": round(float(w), 6)}
                                   for box, label, sc, w in zip(self.boxes_pixels().tolist(), self.region_labels,
                                                                self.region_scores, s.attention)]
            if s.beta is not None:
                item["beta"] = round(s.beta, 6)
            if s.sample is not None:
                item["sample"] = list(divmod(s.sample, self.grid_side))
            if s.heads is not None:
                item["heads"] = np.round(s.heads.astype(np.float32).reshape(*s.heads.shape[:2], self.grid_side, self.grid_side), 6).tolist()
            if s.steered:
                item["steered"] = True
            if s.required:
                item.update(required=True, required_by=s.required)
            if s.outside is not None:
                item["class_token"] = round(s.outside, 6)
            if s.copy is not None:
                item["copy"] = round(s.copy, 6)
            if self.pieces is not None:
                item["text"] = self.pieces[len(steps)]
            steps.append(item)
        out = {"image": self.image, "width": self.width, "height": self.height, "model": self.model,
               "attends_to": self.attends_to, "caption": self.caption, "score": round(self.score, 6),
               "finished": self.finished, "steps": steps,
               "words": [{"text": w.text, "first": w.first, "last": w.last, **({} if w.known else {"known": False})}
                         for w in self.word_spans], "word_map": WORD_MAP}
        if self.text is not None:   # steps are sub-word tokens; the caption is their text
            out["subword"] = True
        if self.question is not None:
            out["question"] = self.question
        if self.guidance:
            out["guidance"] = self.guidance
        if self.steps and self.steps[0].heads is not None:   # which map "grid" is, of every layer's and head's
            out["grid_is"] = HEADS_SUMMARY + (HEADS_OUTSIDE if self.steps[0].outside is not None else "")
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "AttentionTrace":
        steps, boxes, labels, scores = [], None, [], None
        pieces = [s["text"] for s in obj["steps"]] if obj.get("subword") and obj["steps"] and "text" in obj["steps"][0] \
            else None
        for s in obj["steps"]:
            if "grid" in s:
                att = np.asarray(s["grid"], dtype=np.float32).reshape(-1)
            else:
                att = np.asarray([r["weight"] for r in s["regions"]], dtype=np.float32)
                px = np.asarray([r["box"] for r in s["regions"]], dtype=np.float64)
                boxes = (px / np.array([obj["width"], obj["height"]] * 2)).astype(np.float32)
                labels = [r["label"] for r in s["regions"]]
                scores = np.asarray([r["score"] for r in s["regions"]], dtype=np.float32)
            sample, heads = s.get("sample"), s.get("heads")
            if heads is not None:
                heads = np.asarray(heads, dtype=np.float32).reshape(len(heads), len(heads[0]), -1)
            alts = s.get("alternatives", [])
            steps.append(TraceStep(s["word"], s.get("id", -1), s["logprob"], att, [(a["word"], a["prob"]) for a in alts],
                                   s.get("beta"), None if sample is None else sample[0] * len(s["grid"]) + sample[1],
                                   heads, s.get("steered", False), s.get("class_token"),
                                   [a["id"] for a in alts] if alts and all("id" in a for a in alts) else [],
                                   s.get("required_by") if s.get("required") else None, s.get("copy")))
        words = [Word(w["text"], w["first"], w["last"], w.get("known", True)) for w in obj["words"]] \
            if "words" in obj else None
        return cls(obj["model"], obj.get("attends_to", AttendsTo.GRID if boxes is None else AttendsTo.REGIONS), steps,
                   obj["width"], obj["height"], obj.get("image", ""), obj.get("score", 0.0),
                   obj.get("finished", True), boxes, labels, scores, obj["caption"] if obj.get("subword") else None,
                   pieces, words, obj.get("question"), obj.get("guidance"))


def _padded(ids: list[int], alternatives: list) -> list[int | None]:
    return list(ids) if len(ids) == len(alternatives) else [None] * len(alternatives)


def build_trace(hyp, vocab, model_name: str, attends_to: AttendsTo, width: int, height: int, image: str = "",
                regions=None) -> AttentionTrace:
    """Turn a decoding.Hypothesis (token ids, tensors) into a trace with words and numpy arrays."""
    steps = []
    for t, token in enumerate(hyp.tokens):
        att = hyp.attention[t].double().numpy()
        k = len(regions) if regions is not None and attends_to == AttendsTo.REGIONS else att.shape[0]
        att = att[:k] / att[:k].sum()
        top = hyp.top_ids[t].tolist()
        alts = [(vocab.display(i), math.exp(lp)) for i, lp in zip(top, hyp.top_logprobs[t].tolist())]
        steps.append(TraceStep(vocab.words[token], token, float(hyp.logprobs[t]), att.astype(np.float32), alts,
                               None if hyp.beta is None else float(hyp.beta[t]),
                               None if hyp.sample is None else int(hyp.sample[t]),
                               None if hyp.heads is None else hyp.heads[t].half().numpy(),
                               outside=None if hyp.outside is None else float(hyp.outside[t]), alternative_ids=top,
                               copy=None if hyp.copy is None else float(hyp.copy[t])))
    kw = {}
    if attends_to == AttendsTo.REGIONS and regions is not None:
        kw = {"region_boxes": regions.boxes, "region_labels": list(regions.labels), "region_scores": regions.scores}
    if vocab.subword:   # sub-word tokens: the caption is their text, each step its share of it
        kw.update(text=vocab.text(hyp.tokens), pieces=vocab.pieces(hyp.tokens))
    return AttentionTrace(model_name, attends_to, steps, width, height, image, hyp.score, hyp.finished,
                          word_spans=vocab.word_spans(hyp.tokens), **kw)
