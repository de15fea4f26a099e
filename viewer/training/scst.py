"""Self-critical sequence training (Rennie et al. 2017): fine-tune a trained decoder on CIDEr-D.

Each image gets several sampled captions; a caption's reward is its CIDEr-D against the image's
references minus the mean reward of the image's other samples (the baseline of Luo 2020, which
needs no extra greedy decode). The policy gradient covers every stochastic choice the model
made: the words, and for hard attention the attended cells. CIDEr-D is pycocoevalcap's scorer,
with document frequencies taken from all training references (as SCST implementations do)
instead of from the handful of images in a batch. Captions are sampled with dropout off, so
the policy being improved is the one that captions at test time.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs, cook_test

from ..engine.vocab import Vocabulary, tokenize
from ..engine.models import CaptionModel


class _Corpus(list):
    """pycocoevalcap sets CIDEr's log(N documents) from len(crefs); make that the training corpus size."""

    def __init__(self, items, n_documents: int):
        super().__init__(items)
        self.n_documents = n_documents

    def __len__(self) -> int:
        return self.n_documents


class CiderReward:
    """CIDEr-D of captions against references, with the training set's document frequencies."""

    def __init__(self, references: dict[str, list[str]]):
        self.refs = {k: cook_refs([" ".join(tokenize(c)) for c in v]) for k, v in references.items()}
        self.df: defaultdict = defaultdict(float)
        for refs in self.refs.values():
            for ngram in {g for ref in refs for g in ref}:
                self.df[ngram] += 1

    def __call__(self, keys: list[str], captions: list[str]) -> np.ndarray:
        scorer = CiderScorer(n=4, sigma=6.0)
        scorer.document_frequency = self.df
        scorer.ctest = [cook_test(c) for c in captions]
        scorer.crefs = _Corpus([self.refs[k] for k in keys], len(self.refs))
        return np.array(scorer.compute_cider())


def scst_loss(model: CaptionModel, feats, mask, keys: list[str], vocab: Vocabulary, reward: CiderReward,
              samples: int = 5, max_len: int = 20) -> tuple[torch.Tensor, dict[str, float]]:
    n = len(keys)
    training = model.training
    model.eval()   # gradients still flow; only dropout is off
    rows = torch.arange(n, device=feats.device).repeat_interleave(samples)
    # every sample its own seed, so hard attention draws its own cells (a seed drives them in eval mode)
    seeds = torch.randint(0, 2 ** 31 - 1, (n * samples,), device=feats.device)
    state = model.init_state(feats[rows], mask[rows], seeds)
    words = torch.full((n * samples,), vocab.start, dtype=torch.long, device=feats.device)
    alive = torch.ones(n * samples, dtype=torch.bool, device=feats.device)
    banned = torch.tensor([vocab.pad, vocab.start], device=feats.device)
    logp_sum = torch.zeros(n * samples, device=feats.device)
    tokens = []
    for _ in range(max_len):
        step, state = model.forward_step(state, words)
        logp = F.log_softmax(step.logits.index_fill(1, banned, float("-inf")), dim=-1)
        words = torch.multinomial(logp.detach().exp(), 1).squeeze(1)
        chosen = logp.gather(1, words[:, None]).squeeze(1)
        if step.sample_logprob is not None:   # hard attention: the attended cell was a choice too
            chosen = chosen + step.sample_logprob
        logp_sum = logp_sum + chosen * alive
        tokens.append(torch.where(alive, words, torch.full_like(words, vocab.end)))
        alive = alive & (words != vocab.end)
        if not bool(alive.any()):
            break
    model.train(training)
    captions = [" ".join(vocab.words[t] for t in seq[: seq.index(vocab.end) if vocab.end in seq else None])
                for seq in torch.stack(tokens, 1).tolist()]
    scores = reward([k for k in keys for _ in range(samples)], captions).reshape(n, samples)
    baseline = (scores.sum(1, keepdims=True) - scores) / (samples - 1)
    advantage = torch.tensor((scores - baseline).reshape(-1), dtype=torch.float32, device=feats.device)
    loss = -(advantage * logp_sum).mean()
    return loss, {"cider": float(scores.mean())}
