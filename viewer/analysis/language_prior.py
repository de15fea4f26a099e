"""Would the model have said it of any photo? A word's language prior, measured in distribution.

Hiding the photo (blurred away, or its mean colour: pixel_faithfulness.seen_dependence) makes a
photo no model was trained on: a region model's detector finds other boxes there, so nearly every
word's log-prob falls and nearly nothing reads "guessed" (vqa-regions called 228 of the 237
answers the blind model also gives "looked"). Here the word is forced, after the same prefix (an
answer: after the same question), on K photos the model could have seen instead, a fixed seeded
sample of Flickr8k's dev-select half. A word whose first token is the model's top-1 next token on
at least SHARE of them would have been said of most photos: it came from the words before it (or
the question), not from this photo. Where this photo's whole-word log-prob stands among the K is
reported beside it. K and SHARE were chosen on dev-select (`python -m viewer.analysis.prior_choice`,
reports/guessed/choice.json): of 60 vqa-regions answers, K 8 at 0.5 flags 9, none of them right (the
rest: 43% right), 6 of them the blind model's answer too; K 16 flags 5 (one right), K 32 six (one
right); at 0.7 every K flags 3 or fewer.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

from ..engine.forcing import forced
from ..engine.images import load_photo

K = 8           # reference photos
SHARE = 0.5     # "would have said it of most photos": top-1 on at least this share of them
SEED = 0
SPLIT = "dev-select"


def reference_paths(dataset, k: int = K, seed: int = SEED) -> list[str]:
    """The reference photos: `k` of the dataset's dev-select half, drawn with `seed` from its sorted
    paths (the same photos whatever order the split file lists them in)."""
    paths = sorted(dataset.split(SPLIT))
    picked = np.random.default_rng(seed).choice(len(paths), size=min(k, len(paths)), replace=False)
    return [paths[i] for i in sorted(picked)]


class References:
    """The reference photos' decoder inputs per model, computed on first use and kept in memory."""

    def __init__(self, paths: list[str]):
        self.paths = list(paths)
        self._inputs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, dataset, k: int = K, seed: int = SEED) -> References | None:
        """The references of a dataset with photos in dev-select; None (nothing measured) without."""
        if dataset is None or SPLIT.rpartition("-")[0] not in dataset.splits:
            return None
        paths = reference_paths(dataset, k, seed)
        return cls(paths) if paths else None

    def inputs(self, captioner, lm) -> tuple[torch.Tensor, torch.Tensor]:
        """(feats (K, units, C), mask (K, units)) as the loaded model `lm` reads these photos."""
        with self._lock:
            if lm.path not in self._inputs:
                items = captioner.inputs(lm, [load_photo(p) for p in self.paths])
                self._inputs[lm.path] = lm.batch(items, captioner.device)
            return self._inputs[lm.path]


@dataclass
class Prior:
    """How each forced word fares on the reference photos (arrays (..., T), a step per token; a word
    of several tokens is judged at its first step)."""

    share: np.ndarray      # share of the photos on which its first token is the model's top-1 there
    standing: np.ndarray | None   # share of them on which its whole-word log-prob is below this photo's
    k: int

    @property
    def said_of_most(self) -> np.ndarray:
        """The verdict: would have said it of most photos (guessed; an object word: said, not seen)."""
        return self.share >= SHARE


def language_prior(lm, inputs: tuple[torch.Tensor, torch.Tensor], tokens: torch.Tensor, here: torch.Tensor | None = None,
                   prompt: torch.Tensor | None = None, whole_words=lambda lp: lp) -> Prior:
    """`tokens` (N, T) as forced on this photo; `here` (N, T) their log-probs on it (a word's first step
    holding the whole word's, `whole_words`), for the standing; `prompt` (N, L): each row's question.
    Every row is forced on all K reference photos in one call (row i on photo j at i * K + j)."""
    feats, mask = inputs
    n, k = tokens.shape[0], feats.shape[0]
    each = lambda x: None if x is None else x.to(feats.device).repeat_interleave(k, 0)  # noqa: E731
    with torch.inference_mode():
        out = forced(lm.model, feats.repeat(n, *[1] * (feats.dim() - 1)), mask.repeat(n, 1), each(tokens), lm.vocab,
                     soft=True, prompt=each(prompt))
    said = (out.top == each(tokens)).reshape(n, k, -1).float().mean(1).cpu().numpy()
    if here is None:
        return Prior(said, None, k)
    there = whole_words(out.logprobs.reshape(n, k, -1).cpu())
    return Prior(said, (there < torch.as_tensor(here).cpu()[:, None]).float().mean(1).numpy(), k)


def caption_prior(pipe, references: References) -> Prior:
    """(T,) the prior of every word of a Pipeline's forced caption (or answer, with its question)."""
    found = language_prior(pipe.lm, references.inputs(pipe.captioner, pipe.lm), pipe.tokens[None],
                           pipe.whole_words(pipe.base())[None], pipe.prompt, pipe.whole_words)
    return Prior(found.share[0], found.standing[0], found.k)


def said_not_seen(words: list[str], prior: Prior) -> list[str]:
    """The words naming a COCO object that the model would have said of most photos."""
    from .grounding import word_class
    return [w for w, guessed in zip(words, prior.said_of_most) if word_class(w) and guessed]


def verdict(word: str, guessed: bool) -> str | None:
    """The label of a word the model would have said of most photos: "said, not seen" when it names
    an object, else "guessed"; None for a word the photo decided."""
    from .grounding import word_class
    return ("said, not seen" if word_class(word) else "guessed") if guessed else None
