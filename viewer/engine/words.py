"""The word layer: which caption word each decoding step (a token) belongs to, and its text.

A step is a token. For this viewer's own vocabularies a token is a word. A sub-word tokenizer
splits words into pieces, and says so in its token strings: byte-level BPE (GPT-2) and
SentencePiece mark a token that STARTS a word ('Ġ', '▁'), WordPiece (BERT, BLIP) marks one that
CONTINUES a word ('##'). `split_words` groups the steps by those markers; the word's text is its
tokens' decoded text joined. Punctuation and special tokens stand alone.

Everything that speaks of words (grounding, `--boxes`, object words, dependence, triage, the app's
caption) reads this layer, never a step's token string. A multi-token word's map is its FIRST
token's step: that is where the model commits to the word (every token keeps its own map).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MARKERS = {"Ġ": "starts", "▁": "starts", "##": "continues"}   # sub-word conventions, by what the marker says
WORD_MAP = ("a word of several tokens is shown, grounded and explained with its first token's map "
            "(where the model commits to the word); every token keeps its own map in 'steps'")


@dataclass(frozen=True)
class Word:
    text: str            # as read: "bicycle" (its tokens' text joined), "<end>", or the typed word a vocabulary lacks
    first: int           # the step of its first token: where the model commits to the word
    last: int            # the step of its last token
    known: bool = True   # False: a token of it is <unk> (the model's vocabulary lacks the word)

    @property
    def steps(self) -> range:
        return range(self.first, self.last + 1)


def marker_of(tokens: Iterable[str]) -> str | None:
    """The sub-word marker a vocabulary's token strings use most ('Ġ', '▁', '##'), or None (word-level)."""
    counts = Counter(m for tok in tokens for m in MARKERS if tok.startswith(m) and len(tok) > len(m))
    return counts.most_common(1)[0][0] if counts else None


def starts_word(token: str, marker: str | None) -> bool:
    """Whether a token begins a word under `marker`'s convention (every token does without one)."""
    if marker is None:
        return True
    return token.startswith(marker) == (MARKERS[marker] == "starts")


def split_words(tokens: Sequence[str], pieces: Sequence[str], marker: str | None,
                special: Sequence[bool], unknown: Sequence[bool]) -> list[Word]:
    """Steps -> words. `tokens`: each step's token string; `pieces`: its share of the decoded text;
    `special` (end, start) and punctuation-only steps are words of their own, and so is what follows them."""
    groups: list[list] = []          # [first, last, pieces, known]
    after_alone = True
    for t, (tok, piece, sp, unk) in enumerate(zip(tokens, pieces, special, unknown)):
        alone = bool(sp) or not any(c.isalnum() for c in piece)
        if after_alone or alone or starts_word(tok, marker):
            groups.append([t, t, [tok if sp else piece], not unk])
        else:
            g = groups[-1]
            g[1], g[3] = t, g[3] and not unk
            g[2].append(piece)
        after_alone = alone
    return [Word("".join(ps).strip(), first, last, known) for first, last, ps, known in groups]


def step_index(words: Sequence[Word], n_steps: int) -> list[int]:
    """For each step, the index of the word it belongs to."""
    out = [0] * n_steps
    for i, w in enumerate(words):
        for t in w.steps:
            if t < n_steps:
                out[t] = i
    return out


def first_step_words(words: Sequence[Word], n_steps: int) -> list[str]:
    """Per step, its word's text at the word's first step and "" at the others: the per-step word
    list grounding and dependence read, so a multi-token word counts once, at its first token."""
    out = [""] * n_steps
    for w in words:
        if w.first < n_steps:
            out[w.first] = w.text
    return out
