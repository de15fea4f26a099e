"""The word layer: which caption word each decoding step (a token) belongs to, and its text.

A step is a token. For this viewer's own vocabularies a token is a word. A sub-word tokenizer
splits words into pieces, and says so in its token strings: byte-level BPE (GPT-2) and
SentencePiece mark a token that STARTS a word ('Ġ', '▁'), WordPiece (BERT, BLIP) marks one that
CONTINUES a word ('##'). `split_words` groups the steps by those markers; the word's text is its
tokens' decoded text joined. Punctuation and special tokens stand alone, except an apostrophe or a
hyphen inside a word: "man's" and "t-shirt" are one word, whatever the tokenizer made of them.

Everything that speaks of words (grounding, `--boxes`, object words, dependence, triage, the app's
caption) reads this layer, never a step's token string. A multi-token word's map is its FIRST
token's step: that is where the model commits to the word (every token keeps its own map).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MARKERS = {"Ġ": "starts", "▁": "starts", "##": "continues"}   # sub-word conventions, by what the marker says
JOINERS = ("'", "’", "-")   # inside a word: "man's", "t-shirt"
# vocab.tokenize drops apostrophes and hyphens, so a whole-word vocabulary has "man", "s" for
# "man's" and "t", "shirt" for "t-shirt". The word layer joins them back: an "s" after a word is its
# possessive, and these pairs are one hyphenated word (Flickr8k's training captions hyphenate each
# at least 3 times, and more often than they write it apart).
COMPOUNDS = frozenset({("t", "shirt"), ("t", "shirts"), ("go", "round"), ("cross", "country"), ("tri", "colored"),
                       ("multi", "colored"), ("close", "up"), ("spider", "man"), ("make", "up"), ("mid", "flight"),
                       ("mid", "jump"), ("gray", "haired"), ("red", "headed"), ("t", "ball"), ("wet", "suit"),
                       ("one", "handed"), ("4", "wheeler")})
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
    `special` (end, start) and punctuation-only steps are words of their own, and so is what follows them.
    An apostrophe or a hyphen attached to a word joins it to what is attached after it (`JOINERS`):
    possessives and hyphenated words are one word for every tokenizer ("man's", "light-colored").
    WordPiece decodes punctuation with spaces around it, so there the mark always attaches."""
    groups: list[list] = []          # [first, last, pieces, known]
    after_alone = True
    joining = False                  # the last piece ended in a joiner: an attached word piece continues it
    after_blank = False              # the last piece was only a space (BPE's 'Ġ' before '-'): it belongs to this one
    for t, (tok, piece, sp, unk) in enumerate(zip(tokens, pieces, special, unknown)):
        alone = bool(sp) or not any(c.isalnum() for c in piece)
        attached = not sp and not after_alone and (marker == "##" or not piece[:1].isspace())
        joins = attached and (piece.strip()[:1] in JOINERS or (joining and not alone))
        if not sp and (after_blank or joins or (not after_alone and not alone and not starts_word(tok, marker))):
            g = groups[-1]
            g[1], g[3] = t, g[3] and not unk
            g[2].append(piece)
            after_alone = alone and not joins
        else:
            groups.append([t, t, [tok if sp else piece], not unk])
            after_alone = alone
        joining = not sp and piece.strip()[-1:] in JOINERS
        after_blank = not sp and not piece.strip()
    return [Word("".join(p.strip() for p in ps), first, last, known) for first, last, ps, known in groups]


def word_pieces(tokens: list[str]) -> list[str]:
    """Each whole-word token's share of the caption text: " dog", and "'s" or "-shirt" where it joins
    the word before (a possessive "s", the second half of a `COMPOUNDS` pair)."""
    out = []
    for t, tok in enumerate(tokens):
        before = tokens[t - 1] if t else ""
        if (before.isalnum() or before == "<unk>") and tok == "s":
            out.append("'s")
        elif (before, tok) in COMPOUNDS:
            out.append("-" + tok)
        else:
            out.append(" " + tok)
    return out


def spelled(tokens: list[str]) -> str:
    """The text whole-word tokens spell: "a man's t-shirt" for a, man, s, t, shirt (`word_pieces`)."""
    return "".join(word_pieces(tokens)).strip()


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
