"""One tokenizer and vocabulary for training, decoding and scoring."""
from __future__ import annotations

import re
from collections import Counter

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = [PAD, START, END, UNK]
_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case words and numbers; punctuation dropped (as the COCO PTB tokenizer mostly does)."""
    return _WORD.findall(text.lower())


class Vocabulary:
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
