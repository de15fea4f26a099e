"""One decoding loop for every model: greedy, beam search, sampling, forced and branching.

Every strategy is the same loop over `model.forward_step` with all beams of all images in one
batch (one model call per step). Strategies differ only in how candidates for the next word
are proposed; bookkeeping is shared: a candidate that emits <end> is finished, the others fill
the live beams, and at the end each hypothesis is traced back through its back-pointers so the
attention stored for word t is exactly the one the model used to emit it.

A prefix (per image) forces the first words: `forced` decoding is a prefix that ends with <end>
(teacher forcing, for comparing models on identical words); branching is a prefix that ends
with any chosen word, after which the chosen strategy continues.

Steering replaces the model's attention at one step by a given map (models/base.py `steered`),
so a forced prefix up to that step then shows what the model says when made to look there.

Constrained beam search (Anderson, Fernando, Johnson and Gould, EMNLP 2017) is beam search with
`constraints`: per image, a few disjunctive word sets ("bear" or "bears"), each word a token
sequence. The beam is kept per constraint state (which constraints the words so far meet: one bank
of `beam_size` rows per state), every row also proposes the next token of each constraint it has
not met, and the answer is the best finished caption in a state meeting `min_met` of them (all, by
default); failing that, the finished caption meeting most. <end> and length behave as in beam search.
Words to `avoid` (per image) are never completed, and with `no_repeat` no n-gram is said twice
(constraints.py): the same search, no constraints needed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .constraints import Constraint, ConstrainedSearch
from .vocab import Vocabulary
from .models.base import CaptionModel, hiding_step, reorder

STRATEGIES = ("greedy", "beam", "sample", "forced")


@dataclass(frozen=True)
class DecodeSettings:
    strategy: str = "beam"
    beam_size: int = 3
    max_len: int = 20
    length_penalty: float = 0.0   # final score = sum log p / len ** length_penalty (0: none)
    temperature: float = 1.0
    seed: int = 0
    top_k: int = 5                # alternatives recorded per step
    no_repeat: int = 0            # beam/greedy: no token n-gram of this size said twice (0: off); constraints.py

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose from {', '.join(STRATEGIES)}")
        if self.beam_size < 1 or self.max_len < 1 or self.temperature <= 0 or self.top_k < 1:
            raise ValueError("beam size, max length and top-k must be >= 1 and temperature > 0")
        if self.no_repeat and (self.no_repeat < 2 or not self.searches):
            raise ValueError("no_repeat: an n-gram of 2 tokens or more, with beam search or greedy decoding")

    @property
    def searches(self) -> bool:
        """Beam search or greedy: the decodings that constraints, words to avoid and no_repeat steer
        (a sampled or forced caption has no search to steer)."""
        return self.strategy in ("beam", "greedy")

    @property
    def width(self) -> int:
        return self.beam_size if self.strategy == "beam" else 1


@dataclass
class Hypothesis:
    """One decoded sequence with everything recorded per emitted token (all CPU tensors)."""

    tokens: list[int]
    logprobs: list[float]
    attention: torch.Tensor          # (T, K)
    top_ids: torch.Tensor            # (T, top_k)
    top_logprobs: torch.Tensor       # (T, top_k)
    beta: torch.Tensor | None = None     # (T,)
    sample: torch.Tensor | None = None   # (T,)
    heads: torch.Tensor | None = None    # (T, layers, heads, K) multi-head models
    outside: torch.Tensor | None = None  # (T,) weight outside the map (a ViT's class token)
    copy: torch.Tensor | None = None     # (T,) p(copy) (updown-copy)
    finished: bool = True
    score: float = 0.0               # length-normalised total log-probability
    required: dict[int, list[int]] | None = None   # constrained search: constraint met -> the steps of its word


class Ending(NamedTuple):
    """Where a hypothesis stops: enough for `_backtrack` to rebuild it through the back-pointers."""

    score: float         # total log-probability, before length normalisation
    step: int            # the step that emitted `word`
    row: int             # the live row (image * k + beam) that `word` extended
    word: int            # the last token: <end> for a finished hypothesis
    logprob: float       # that token's log-probability
    finished: bool = True


def _initial_state(model: CaptionModel, feats: torch.Tensor, mask: torch.Tensor, init_mask: torch.Tensor | None,
                   seeds: torch.Tensor | None, prompt: torch.Tensor | None, seed: int, k: int) -> dict:
    """The model's state before its first word, each image's repeated for its k rows."""
    n_img, device = feats.shape[0], feats.device
    seeds = torch.full((n_img,), seed, dtype=torch.long, device=device) if seeds is None else seeds.to(device)
    state = model.init_state(feats, mask if init_mask is None else init_mask, seeds)
    state["mask"] = mask
    if prompt is not None:
        state = model.with_prompt(state, prompt)
    return reorder(state, torch.arange(n_img, device=device).repeat_interleave(k))


@torch.no_grad()
def decode(model: CaptionModel, feats: torch.Tensor, mask: torch.Tensor, settings: DecodeSettings,
           vocab: Vocabulary, prefixes: list[list[int]] | None = None,
           steer: tuple[int, torch.Tensor] | None = None, init_mask: torch.Tensor | None = None,
           hide: tuple[int, torch.Tensor] | None = None, seeds: torch.Tensor | None = None,
           constraints: list[list[Constraint]] | None = None, need: int | None = None,
           prompt: torch.Tensor | None = None, avoid: list[list[tuple[int, ...]]] | None = None) -> list[list[Hypothesis]]:
    """Decode a batch of images; returns, per image, its hypotheses best first (beam: `beam_size`).

    <pad> and <start> are never generated (a forced prefix may still contain anything). `steer` =
    (t, maps (n_img, K), rows summing to 1): every beam of image i attends to maps[i] at step t.
    `init_mask`: what the initial state sees, if not `mask` (faithfulness.py: hide units from the
    attention only). `hide` = (t, masks (n_img, K)): at step t only the model sees `masks`.
    `seeds` (n_img,): each image's seed for stochastic attention (SCST replays them). `constraints`
    (per image, constraints.py): constrained beam search, `need` of them met (default all); `avoid`
    (per image, token sequences): words it never completes. `prompt` (n_img, L) word ids: a question
    answering model's questions (models/vqa.py `with_prompt`)."""
    if (avoid is not None or settings.no_repeat) and constraints is None:
        constraints = [[] for _ in range(len(mask))]
    _check(settings, mask, prefixes, steer, hide, constraints, need)
    model.eval()
    search = None if constraints is None else ConstrainedSearch(constraints, settings.width, need, prefixes, avoid,
                                                                settings.no_repeat)
    n_img, k, device = feats.shape[0], settings.width if search is None else search.k, feats.device
    prefixes = prefixes or [[] for _ in range(n_img)]
    longest = max(len(p) for p in prefixes)   # forced: the caption's length; else room to go past the prefix
    max_len = longest if settings.strategy == "forced" else max(settings.max_len, longest + 1)

    state = _initial_state(model, feats, mask, init_mask, seeds, prompt, settings.seed, k)
    words = torch.full((n_img * k,), vocab.start, dtype=torch.long, device=device)
    scores = torch.full((n_img, k), float("-inf"), device=device)
    scores[:, 0] = 0.0
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    banned = torch.tensor([vocab.pad, vocab.start], device=device)
    history: list[dict] = []
    finished: list[list[Ending]] = [[] for _ in range(n_img)]

    for t in range(max_len):
        step, state = _step(model, state, words, t, steer, hide, k)
        logp = F.log_softmax(step.logits.float().index_fill(1, banned, float("-inf")), dim=-1)
        top_lp, top_ids = logp.topk(min(settings.top_k, logp.shape[1]), dim=-1)
        record = {"attention": step.attention, "top_ids": top_ids, "top_lp": top_lp, "beta": step.beta,
                  "sample": step.sample, "heads": step.heads, "outside": step.outside, "copy": step.copy}
        parents, new_words, new_scores, word_lp = (
            _select(_propose(logp, scores, prefixes, t, settings, generator), finished, t, k, vocab.end) if search is None
            else search.select(search.propose(logp, scores, t), finished, t, vocab.end, Ending))
        parents_t = torch.tensor(parents, device=device)
        record.update(parent=parents, word=new_words, word_lp=word_lp)
        history.append(record)
        scores = torch.tensor(new_scores, device=device).view(n_img, k)
        over = all(len(f) >= k for f in finished) if search is None else \
            search.done(finished, scores, settings.length_penalty)
        if over or bool(torch.isinf(scores).all()):
            break
        if k > 1:   # one row per image (greedy, sampling, forced) never moves
            state = reorder(state, parents_t, model.image_state)
        words = torch.tensor(new_words, device=device)

    if search is None:
        return _collect(history, finished, scores, n_img, k, settings.length_penalty)
    return _constrained(search, history, finished, scores, n_img, k, settings)


def _constrained(search: ConstrainedSearch, history, finished, scores, n_img, k, settings) -> list[list[Hypothesis]]:
    """The captions constrained search accepts, each with the steps of the words that met its constraints."""
    live = [_live_ends(history, scores, i, k) for i in range(n_img)]
    found = _collect(history, search.accepted(finished, live), scores, n_img, k, settings.length_penalty, settings.width)
    for i, hyps in enumerate(found):
        for h in hyps:
            h.required = search.required(i, h.tokens)
        # rows added to fill the beam may meet fewer constraints: those meeting more come first, else
        # _collect's order stands (a stable sort)
        hyps.sort(key=lambda h: -min(len(h.required), search.need[i]))
        del hyps[settings.width:]
    return found


def _check(settings: DecodeSettings, mask, prefixes, steer, hide, constraints, need) -> None:
    if need is not None and need < 1:
        raise ValueError(f"need {need}: at least one required word must be met (None: all of them)")
    if constraints is not None and (not settings.searches or len(constraints) != len(mask)):
        raise ValueError("constrained decoding is beam search (or greedy), one constraint list per image")
    if settings.strategy == "forced" and not prefixes:
        raise ValueError("forced decoding needs the caption to score")
    if steer is not None and steer[1].shape != mask.shape:
        raise ValueError(f"steering needs one map of {mask.shape[1]} weights per image, not {tuple(steer[1].shape)}")
    if hide is not None and hide[1].shape != mask.shape:
        raise ValueError(f"hiding needs one mask of {mask.shape[1]} units per image, not {tuple(hide[1].shape)}")


def _step(model: CaptionModel, state, words, t: int, steer, hide, k: int):
    """One forward step of every row, steered or hidden at the step they name (that step only)."""
    device = words.device
    if steer is not None and t == steer[0]:
        state["steer"] = steer[1].to(device).repeat_interleave(k, 0)
    if hide is not None and t == hide[0]:
        step, state = hiding_step(model, state, words, hide[1].to(device).repeat_interleave(k, 0))
    else:
        step, state = model.forward_step(state, words)
    state.pop("steer", None)
    return step, state


def _select(candidates, finished: list[list[Ending]], t: int, k: int, end: int):
    """The next k rows per image from its candidates (best first): an <end> among the best k
    finishes a hypothesis, the best k others go on, anything ranked below them is pruned; dead
    filler rows keep every image at k. Returns (parents, words, scores, word log-probs)."""
    parents, new_words, new_scores, word_lp = [], [], [], []
    for i, cands in enumerate(candidates):
        live = []
        for rank, (row, word, score, lp) in enumerate(cands):
            if score == float("-inf") or len(live) == k or len(finished[i]) >= k:
                break
            if word != end:
                live.append((row, word, score, lp))
            elif rank < k:
                finished[i].append(Ending(score, t, row, word, lp))
        live += [(i * k, end, float("-inf"), 0.0)] * (k - len(live))
        for row, word, score, lp in live:
            parents.append(row); new_words.append(word); new_scores.append(score); word_lp.append(lp)
    return parents, new_words, new_scores, word_lp


def _propose(logp, scores, prefixes, t, settings, generator):
    """Per image: candidate (row, word, total score, word log-prob) tuples, best first.

    Everything is gathered on the device first and moved to Python lists once per step.
    """
    n_img, k = scores.shape
    vocab = logp.shape[1]
    total = scores.view(-1, 1) + logp
    base = torch.arange(n_img, device=logp.device) * k            # each image's first row
    forced = torch.tensor([p[t] if t < len(p) else -1 for p in prefixes], device=logp.device)
    single = forced                                                # one candidate: the forced word...
    if settings.strategy == "sample":                              # ...or else a sampled one
        drawn = torch.multinomial(F.softmax(logp[base] / settings.temperature, dim=-1), 1, generator=generator)
        single = torch.where(forced >= 0, forced, drawn.squeeze(1))
    w = single.clamp(min=0)
    singles = zip(base.tolist(), single.tolist(), total[base, w].tolist(), logp[base, w].tolist())
    searched = None
    if settings.searches:
        best_total, best = total.view(n_img, k * vocab).topk(min(2 * k, k * vocab), dim=1)
        best_lp = logp.view(n_img, k * vocab).gather(1, best)
        rows, words = (best // vocab + base[:, None]).tolist(), (best % vocab).tolist()
        searched = [list(zip(*c)) for c in zip(rows, words, best_total.tolist(), best_lp.tolist())]
    out = []
    for i, (row, word, score, lp) in enumerate(singles):
        if word >= 0:
            out.append([(row, word, score, lp)])
        else:   # no forced word: beam/greedy candidates, or nothing when a forced caption is over
            out.append(searched[i] if searched is not None else [])
    return out


def _collect(history, chosen, scores, n_img, k, length_penalty, want: int | None = None) -> list[list[Hypothesis]]:
    """Trace each image's chosen endings (its finished captions, or those constrained search
    accepts) back through their parents and, while fewer than `want` (default k, its rows), live
    rows to fill its beams, marked unfinished: the chosen first, then the fill, each best score
    first, so a live row never outranks a finished caption however well it scores."""
    want = k if want is None else want
    stacked = {key: torch.stack([h[key] for h in history]).cpu() for key in ("attention", "top_ids", "top_lp")}
    for key in ("beta", "sample", "heads", "outside", "copy"):
        stacked[key] = torch.stack([h[key] for h in history]).cpu() if history[0][key] is not None else None
    results = []
    for i in range(n_img):   # (constrained search may have chosen live rows already)
        fill = [e for e, _ in _live_ends(history, scores, i, k) if e not in chosen[i]][:max(0, want - len(chosen[i]))]
        hyps = []
        for ends in (chosen[i], fill):
            hyps += sorted((_backtrack(history, stacked, e, length_penalty) for e in ends), key=lambda h: -h.score)
        results.append(hyps)
    return results


def _live_ends(history, scores, i: int, k: int) -> list[tuple[Ending, int]]:
    """Image i's rows still live after the last step, each as an unfinished Ending with its row."""
    last, rec = len(history) - 1, history[-1]
    return [(Ending(s, last, rec["parent"][r], rec["word"][r], rec["word_lp"][r], finished=False), r)
            for r in range(i * k, (i + 1) * k) if (s := scores[i, r - i * k].item()) != float("-inf")]


def _backtrack(history, stacked, end: Ending, length_penalty) -> Hypothesis:
    row = end.row
    rows, tokens, lps = [row], [end.word], [end.logprob]
    for t in range(end.step - 1, -1, -1):
        rec = history[t]
        tokens.append(rec["word"][row]); lps.append(rec["word_lp"][row])
        row = rec["parent"][row]
        rows.append(row)
    rows, tokens, lps = rows[::-1], tokens[::-1], lps[::-1]
    steps = torch.arange(len(rows))
    idx = torch.tensor(rows)
    pick = lambda key: None if stacked[key] is None else stacked[key][steps, idx]  # noqa: E731
    return Hypothesis(tokens=tokens, logprobs=lps, attention=pick("attention"), top_ids=pick("top_ids"),
                      top_logprobs=pick("top_lp"), beta=pick("beta"), sample=pick("sample"), heads=pick("heads"),
                      outside=pick("outside"), copy=pick("copy"), finished=end.finished,
                      score=end.score / (len(tokens) ** length_penalty))
