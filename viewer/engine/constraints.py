"""Constrained beam search's bookkeeping (Anderson, Fernando, Johnson and Gould, EMNLP 2017), for
the one decoding loop (decoding.py): the caption must include some words, and the model writes
the rest.

A constraint is a disjunctive set of words ("bear" or "bears"), each word a token sequence (a word
of several sub-word tokens is met when all its tokens are emitted in a row). A row's *state* is
the set of constraints its tokens meet so far (a bit mask; at most `MAX_CONSTRAINTS` constraints,
so at most 16 states). The beam is kept per state, `beam` rows each: the rows of image i are
i * k + state * beam + j with k = beam * states. Every live row proposes, besides the best tokens
overall, the next token of every word of every constraint it has not met (so a constrained word
is always tried, however unlikely). The answer is the best finished caption whose state meets at
least `need` constraints (all, by default); failing that, of the finished captions and the rows
still live at the length limit, those meeting most (a finished one first where they meet as many). The
search stops when no live row can beat the `beam` best such captions (or at the length limit).

Words to *avoid* (per image, token sequences) are never completed: a row whose tokens end with all
but the last token of such a word cannot emit that last token (a one-token word is never emitted),
as transformers' `bad_words_ids` rules words out. A word's tokens that begin a longer word are ruled
out with it (a sub-word "man" also ends "man|go" there); a forced prefix is never ruled out.
With `no_repeat` n, no row says an n-gram of tokens it has said before (transformers'
`no_repeat_ngram_size`): a model pushed off the words it prefers tends to loop ("a brown and white
brown and white").
"""
from __future__ import annotations

import torch

MAX_CONSTRAINTS = 4

Constraint = list[tuple[int, ...]]   # the words (token sequences) any of which meets it
Requirement = tuple[list[str], str]  # the words any of which meets it, and who asked ("user", "detector")


class ConstrainedSearch:
    def __init__(self, constraints: list[list[Constraint]], beam: int, need: int | None = None,
                 prefixes: list[list[int]] | None = None, avoid: list[list[tuple[int, ...]]] | None = None,
                 no_repeat: int = 0):
        """`prefixes`: per image, tokens every caption starts with (branching: a word chosen in the
        app, the constraints still to meet after it). `avoid`: per image, words never to complete.
        `no_repeat`: the n-gram size no row may repeat (0: any)."""
        if any(len(c) > MAX_CONSTRAINTS for c in constraints):
            raise ValueError(f"at most {MAX_CONSTRAINTS} constraints per photo")
        if any(not words or any(not w for w in words) for c in constraints for words in c):
            raise ValueError("a constraint needs at least one word, and a word at least one token")
        self.sets = [[[tuple(w) for w in words] for words in c] for c in constraints]
        self.prefixes = prefixes or [[] for _ in constraints]
        avoid = [[tuple(w) for w in words if w] for words in (avoid or [[] for _ in constraints])]
        self.avoid_one = [sorted({w[0] for w in words if len(w) == 1}) for words in avoid]   # masked at every step
        self.avoid_more = [[w for w in words if len(w) > 1] for words in avoid]            # after their other tokens
        self.no_repeat = no_repeat
        self.beam, self.states = beam, 2 ** max((len(c) for c in constraints), default=0)
        self.k = beam * self.states
        self.need = [len(c) if need is None else min(need, len(c)) for c in self.sets]
        rows = len(constraints) * self.k
        self.tokens: list[tuple[int, ...]] = [()] * rows
        self.met = [0] * rows
        self.ends: dict[tuple[int, int, int], int] = {}   # (image, step, row) of a finished caption -> its state

    def meets(self, i: int, tokens: tuple[int, ...]) -> int:
        """The constraints of image i whose word ends the tokens, as a mask."""
        return sum(1 << c for c, words in enumerate(self.sets[i]) if any(tokens[-len(w):] == w for w in words))

    def next_tokens(self, i: int, row: int) -> set[int]:
        """The token that carries each word of each constraint the row has not met one step on: after
        the longest start of the word that ends the row's tokens (from its first token if none)."""
        out, tokens = set(), self.tokens[row]
        for c, words in enumerate(self.sets[i]):
            if self.met[row] >> c & 1:
                continue
            for w in words:
                done = next((m for m in range(min(len(w) - 1, len(tokens)), 0, -1) if tokens[-m:] == w[:m]), 0)
                out.add(w[done])
        return out

    def propose(self, logp: torch.Tensor, scores: torch.Tensor, t: int) -> list[list[tuple]]:
        """Per image: candidate (row, word, total score, word log-prob), best first: each live row's
        best 2 * beam tokens (each state's bank is searched as a beam of its own) and its
        constrained next tokens; within the image's prefix, only the prefix's token at step t."""
        n_img, k = scores.shape
        logp = self.ruled_out(logp, t)
        total = scores.view(-1, 1) + logp
        best = total.topk(min(2 * self.beam, logp.shape[1]), dim=1).indices.tolist()
        out = []
        for i in range(n_img):
            cands, prefix = set(), self.prefixes[i]
            for j in range(k):
                row = i * k + j
                if scores[i, j].item() == float("-inf"):
                    continue
                if t < len(prefix):
                    cands.add((row, prefix[t]))
                else:
                    cands |= {(row, w) for w in best[row]} | {(row, w) for w in self.next_tokens(i, row)}
            rows = torch.tensor([r for r, _ in cands])
            words = torch.tensor([w for _, w in cands])
            tot, lp = total[rows, words].tolist(), logp[rows, words].tolist()
            out.append(sorted(((r, w, s, p) for (r, w), s, p in zip(cands, tot, lp)), key=lambda c: -c[2]))
        return out

    def ruled_out(self, logp: torch.Tensor, t: int) -> torch.Tensor:
        """`logp` with the last token of every word to avoid at -inf in the rows it would complete
        (rows still within their prefix excepted)."""
        k = logp.shape[0] // len(self.sets)
        rows, tokens, images = [], [], []
        for i, (one, more) in enumerate(zip(self.avoid_one, self.avoid_more)):
            if t < len(self.prefixes[i]) or not (one or more or self.no_repeat):
                continue
            images += [(i, one)] if one else []
            for row in range(i * k, (i + 1) * k):
                had = self.tokens[row]
                for w in more:
                    if had[len(had) - len(w) + 1:] == w[:-1]:
                        rows.append(row); tokens.append(w[-1])
                for token in self.repeats(had):
                    rows.append(row); tokens.append(token)
        if not rows and not images:
            return logp
        logp = logp.clone()
        for i, one in images:
            logp[i * k:(i + 1) * k, one] = float("-inf")
        logp[rows, tokens] = float("-inf")
        return logp

    def repeats(self, had: tuple[int, ...]) -> set[int]:
        """The tokens that would end an n-gram (`no_repeat`) the row has said before."""
        n = self.no_repeat
        if not n or len(had) < n:
            return set()
        tail = had[len(had) - n + 1:]
        return {had[j + n - 1] for j in range(len(had) - n + 1) if had[j:j + n - 1] == tail}

    def select(self, candidates, finished: list[list], t: int, end: int, ending) -> tuple[list, list, list, list]:
        """The next rows, `beam` per state and image, from the candidates (best first): an <end> among
        a state's best `beam` finishes a caption in that state. Returns (parents, words, scores, log-probs)."""
        parents, words, scores, lps = [], [], [], []
        tokens, met = [], []
        for i, cands in enumerate(candidates):
            banks: list[list] = [[] for _ in range(self.states)]
            ranks = [0] * self.states
            for row, word, score, lp in cands:
                if score == float("-inf"):
                    break
                if word == end:
                    state = self.met[row]
                    if ranks[state] < self.beam:
                        finished[i].append(ending(score, t, row, word, lp))
                        self.ends[(i, t, row)] = state
                    ranks[state] += 1
                    continue
                grown = self.tokens[row] + (word,)
                state = self.met[row] | self.meets(i, grown)
                ranks[state] += 1
                if len(banks[state]) < self.beam:
                    banks[state].append((row, word, score, lp, grown))
            for bank in banks:
                bank += [(i * self.k, end, float("-inf"), 0.0, ())] * (self.beam - len(bank))
                for row, word, score, lp, grown in bank:
                    parents.append(row); words.append(word); scores.append(score); lps.append(lp)
                    tokens.append(grown); met.append(self.met[row] | self.meets(i, grown) if grown else 0)
        self.tokens, self.met = tokens, met
        return parents, words, scores, lps

    def accepted(self, finished: list[list], live: list[list]) -> list[list]:
        """Per image, the captions to return: the finished ones meeting `need` constraints; else, of
        the finished ones and the live rows (`live`: per image, (unfinished Ending, row) at the
        length limit), those meeting most: the finished ones where any meets as many (decoding.py
        ranks what is accepted ahead of the live rows it adds to fill the beams)."""
        out = []
        for i, ends in enumerate(finished):
            count = [bin(self.ends[(i, e.step, e.row)]).count("1") for e in ends]
            enough = [e for e, n in zip(ends, count) if n >= self.need[i]]
            pool = list(zip(ends, count)) + [(e, bin(self.met[row]).count("1")) for e, row in live[i]]
            most = max((n for _, n in pool), default=0)
            best = [e for e, n in pool if n == most]
            out.append(enough or [e for e in best if e.finished] or best)
        return out

    def done(self, finished: list[list], scores: torch.Tensor, length_penalty: float) -> bool:
        """Whether no live row can still beat each image's `beam` best finished captions meeting
        `need` constraints (a caption's log-prob only falls as it grows; with a length penalty it
        may not, so the search then runs to the length limit). The best is settled once no live row
        beats it; the others fill the beams a person can pick from."""
        if length_penalty:
            return False
        for i, ends in enumerate(finished):
            met = sorted((e.score for e in ends if bin(self.ends[(i, e.step, e.row)]).count("1") >= self.need[i]),
                         reverse=True)
            if len(met) < self.beam or met[self.beam - 1] < scores[i].max().item():
                return False
        return True

    def required(self, i: int, tokens: list[int]) -> dict[int, list[int]]:
        """Each constraint of image i a caption meets -> the steps of its word's first occurrence."""
        out = {}
        for c, words in enumerate(self.sets[i]):
            spans = [list(range(s, s + len(w))) for s in range(len(tokens)) for w in words
                     if tuple(tokens[s:s + len(w)]) == w]
            if spans:
                out[c] = min(spans)
        return out


def plural(word: str) -> str:
    """The regular English plural, for constraint word sets ("bear" -> "bears", "bus" -> "buses")."""
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "i", "o", "u"):
        return word[:-1] + "ies"
    return word + "s"


def word_tokens(vocab, word: str) -> set[tuple[int, ...]]:
    """The token sequences a word is emitted as: alone and after another word (a sub-word tokenizer
    spells a word differently after a space); none when a whole-word vocabulary lacks it."""
    alone = tuple(vocab.encode(word))
    after = tuple(vocab.encode("a " + word))[len(vocab.encode("a")):]
    return {t for t in (alone, after) if t and getattr(vocab, "unk", None) not in t}


def avoid_tokens(vocab, words: list[str]) -> list[tuple[int, ...]]:
    """Words to avoid as token sequences; "<unk>" is the vocabulary's unknown token, and a word the
    model cannot say needs no ruling out."""
    unk = getattr(vocab, "unk", None)
    found = {(unk,)} if "<unk>" in words and unk is not None else set()
    return sorted(found.union(*(word_tokens(vocab, w) for w in words if w != "<unk>")))


def constraint_tokens(vocab, words: list[str]) -> Constraint:
    """A constraint's words as token sequences; the words the model cannot say are left out, and a
    constraint none of whose words it can say is refused."""
    found = sorted(set().union(*(word_tokens(vocab, w) for w in words)))
    if not found:
        raise ValueError(f"the model's vocabulary has no word {' or '.join(repr(w) for w in words)}: "
                         "it cannot be required")
    return found
