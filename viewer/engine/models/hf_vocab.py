"""The tokens of a Hugging Face model as our vocabulary: each step is one tokenizer token (sub-words
too); `HFVocab.words` are the tokenizer's token strings, the caption is its decoded text."""
from __future__ import annotations

import os

from ..words import Word, marker_of, split_words, starts_word

class HFVocab:
    """The tokenizer as a `Vocabulary`: `words[i]` is token i's string, the end-of-text token is
    "<end>" (as every trace expects); one extra id, the decoder's vocab_size, is a virtual "<start>" that the
    model reads as the decoder start token (GPT-2's start and end are one token, and decoding never
    generates <start> or <pad>: the virtual id is both)."""

    def __init__(self, tokenizer, end_id: int, size: int):
        """`size`: the decoder's vocabulary (>= the tokenizer's; ids the tokenizer lacks are named "<id>")."""
        self.tokenizer = tokenizer
        words = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.words = [w if w is not None else f"<{i}>" for i, w in enumerate(words)]
        self.words += [f"<{i}>" for i in range(len(self.words), size)]
        self.end = end_id
        self.words[end_id] = "<end>"
        self.start = self.pad = size          # the virtual <start>
        self.words.append("<start>")
        self.unk = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else end_id
        self.index = {}
        for i, w in enumerate(self.words):
            self.index.setdefault(w, i)
        self.marker = marker_of(self.words)   # 'Ġ' (byte-level BPE), '##' (WordPiece), '▁', or None

    subword = True

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids) -> list[str]:
        return [self.words[i] for i in ids]

    def text(self, ids, clean: bool = True) -> str:
        """The caption the tokens spell (sub-words joined as the tokenizer joins them; `clean`: with
        its clean-up of spaces before punctuation)."""
        kept = [i for i in ids if i not in (self.end, self.start)]
        return self.tokenizer.decode(kept, skip_special_tokens=True,
                                     **({} if clean else {"clean_up_tokenization_spaces": False})).strip()

    def display(self, token: int) -> str:
        """A token as a person reads it: its own text, '-ic' for a piece that continues a word."""
        if token in (self.end, self.start):
            return self.words[token]
        text = self.tokenizer.decode([token], clean_up_tokenization_spaces=False).strip()
        if starts_word(self.words[token], self.marker):
            return text
        return "-" + (text[len(self.marker):] if self.marker and text.startswith(self.marker) else text)

    def word_spans(self, ids) -> list[Word]:
        """The words of a token sequence, grouped by the tokenizer's own markers (words.py)."""
        specials = {self.end, self.start} | (set(self.tokenizer.all_special_ids) - {self.unk})
        return split_words(self.decode(ids), self.pieces(ids), self.marker, [i in specials for i in ids],
                           [i == self.unk and self.unk != self.end for i in ids])

    def pieces(self, ids) -> list[str]:
        """Each token's share of the text (decoded incrementally without the clean-up, which may
        rewrite earlier text, so any tokenizer's joining rule holds): " cup", "cake" are one word in
        two steps; the end token's share is ""."""
        out, before = [], ""
        for t in range(1, len(ids) + 1):
            now = self.text(ids[:t], clean=False)
            shared = len(os.path.commonprefix([before, now]))
            out.append(now[shared:])
            before = now
        return out
