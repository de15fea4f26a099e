"""Self-critical sequence training (Rennie et al. 2017): fine-tune a trained decoder on CIDEr-D.

Each image gets several sampled captions (decoding's sampling, each sample its own seed); a caption's reward is its CIDEr-D against the image's
references minus the mean reward of the image's other samples (the baseline of Luo 2020, which
needs no extra greedy decode). The policy gradient covers every stochastic choice the model
made: the words, and for hard attention the attended cells. CIDEr-D is pycocoevalcap's scorer,
with document frequencies taken from all training references (as SCST implementations do)
instead of from the handful of images in a batch. Captions are sampled with dropout off, so
the policy being improved is the one that captions at test time. The sampled token ids are then
forced back through the model with gradients (engine/forcing.py, the same seeds replaying the same
cells), so the log-probabilities the gradient follows are those of the one forcing path.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs, cook_test

from ..engine.decoding import DecodeSettings, decode
from ..engine.forcing import forced
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
    seed = int(torch.randint(0, 2 ** 31 - 1, ()))   # the word draws: from torch's RNG, so a training seed fixes them
    hyps = decode(model, feats[rows], mask[rows], DecodeSettings(strategy="sample", max_len=max_len, seed=seed), vocab,
                  seeds=seeds)
    sampled = [h[0].tokens for h in hyps]
    longest = max(len(t) for t in sampled)
    tokens = torch.tensor([t + [vocab.pad] * (longest - len(t)) for t in sampled], device=feats.device)
    valid = torch.arange(longest, device=feats.device)[None] < torch.tensor([len(t) for t in sampled],
                                                                            device=feats.device)[:, None]
    out = forced(model, feats[rows], mask[rows], tokens, vocab, seeds=seeds)
    chosen = out.logprobs if out.cells is None else out.logprobs + out.cells   # hard attention: the cells were choices too
    logp_sum = torch.where(valid, chosen, torch.zeros_like(chosen)).sum(1)
    model.train(training)
    captions = [vocab.text(t) for t in sampled]
    scores = reward([k for k in keys for _ in range(samples)], captions).reshape(n, samples)
    baseline = (scores.sum(1, keepdims=True) - scores) / (samples - 1)
    advantage = torch.tensor((scores - baseline).reshape(-1), dtype=torch.float32, device=feats.device)
    loss = -(advantage * logp_sum).mean()
    return loss, {"cider": float(scores.mean())}
