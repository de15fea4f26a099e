"""One tokenizer and vocabulary for training, decoding and scoring."""
from __future__ import annotations

import re
from collections import Counter

from .words import Word, spelled, split_words, word_pieces

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = [PAD, START, END, UNK]
_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case words and numbers; punctuation dropped (as the COCO PTB tokenizer mostly does)."""
    return _WORD.findall(text.lower())


class Vocabulary:
    """Whole words: a token is a word (`word_spans` gives one word per step)."""

    subword = False

    def __init__(self, words: list[str]):
        if words[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}")
        if len(set(words)) != len(words):
            raise ValueError("the vocabulary has repeated words")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad, self.start, self.end, self.unk = (self.index[s] for s in SPECIALS)

    @classmethod
    def build(cls, captions, min_freq: int = 5) -> "Vocabulary":
        counts = Counter(w for c in captions for w in tokenize(c))
        kept = sorted((w for w, n in counts.items() if n >= min_freq), key=lambda w: (-counts[w], w))
        return cls(SPECIALS + kept)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        """Caption text -> token ids, without <start>/<end>."""
        return [self.index.get(w, self.unk) for w in tokenize(text)]

    def decode(self, ids) -> list[str]:
        return [self.words[i] for i in ids]

    def text(self, ids) -> str:
        """The caption the tokens spell (specials left out; "man's", "t-shirt" joined, as the word layer reads them)."""
        return spelled([self.words[i] for i in ids if i not in (self.end, self.start, self.pad)])

    def display(self, token: int) -> str:
        """A token as a person reads it (a next-word choice, a branch)."""
        return self.words[token]

    def word_spans(self, ids) -> list[Word]:
        """The words of a token sequence (words.py): one per token, a possessive "s" and the second
        half of a `words.COMPOUNDS` pair joined to the token before."""
        tokens, special = self.decode(ids), [i in (self.end, self.start, self.pad) for i in ids]
        pieces = [tok if sp else piece for tok, piece, sp in zip(tokens, word_pieces(tokens), special)]
        return split_words(tokens, pieces, None, special, [i == self.unk for i in ids])
