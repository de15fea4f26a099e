"""Show, Attend and Tell (Xu et al. 2015): LSTM decoder over 14x14 grid annotation vectors.

`sat-soft`: deterministic soft attention, context = sum_i alpha_i a_i, gated by the scalar
beta = sigmoid(f_beta(h)) (the paper's "selector"); training adds the doubly stochastic
regulariser lambda * sum_i (1 - sum_t alpha_ti)^2.

`sat-hard`: stochastic hard attention: a cell s_t ~ Multinoulli(alpha) is attended, context =
a_{s_t}. Training follows the paper's REINFORCE-style objective (Sec. 4.1): the log-likelihood
of the caption given the sampled locations, plus lambda_r (log p(y|s) - b) * grad log p(s) with a
moving-average baseline b, plus lambda_e times the attention entropy; for a random half of the
images (per image) the expectation (soft context) is used instead of a sample, as the paper did. At inference the
cell is drawn by inverse-CDF from a counter-based hash of (seed, step), so a decode is
reproducible with a seed, and re-scoring the same words (forced decoding) draws the same cells.
Steered to a one-hot map (base.steered), it attends exactly that cell.

Output: the paper's deep output layer p(y_t) ~ exp(L_o(E y_{t-1} + L_h h_t + L_z z_t)).

Hidden cells (out of the mask) get zero alpha, are never drawn, and are left out of the mean
feature that starts the LSTM; that mean is read once, so `decode(init_mask=...)` (faithfulness
`keep_mean`) changes only the initial state.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..images import AttendsTo
from .base import CaptionModel, State, Step, attend, masked_mean, register, steered, supervision, token_cross_entropy


@register("sat-soft", attention="soft")
@register("sat-hard", attention="hard")
class ShowAttendTell(CaptionModel):
    attends_to = AttendsTo.GRID
    image_state = ("a", "a_att", "mask")

    def __init__(self, vocab_size: int, feature_dim: int, attention: str = "soft", embed_dim: int = 256,
                 hidden_dim: int = 512, att_dim: int = 256, proj_dim: int = 512, dropout: float = 0.5,
                 alpha_c: float = 0.005, lambda_r: float = 1.0, lambda_e: float = 0.01):
        super().__init__()
        if attention not in ("soft", "hard"):
            raise ValueError(f"attention must be 'soft' or 'hard', not {attention!r}")
        self.attention, self.alpha_c, self.lambda_r, self.lambda_e = attention, alpha_c, lambda_r, lambda_e
        self.feat_proj = nn.Sequential(nn.Linear(feature_dim, proj_dim), nn.ReLU(), nn.Dropout(dropout))
        self.init_h, self.init_c = nn.Linear(proj_dim, hidden_dim), nn.Linear(proj_dim, hidden_dim)
        self.att_feat, self.att_hidden = nn.Linear(proj_dim, att_dim), nn.Linear(hidden_dim, att_dim)
        self.att_score = nn.Linear(att_dim, 1)
        self.f_beta = nn.Linear(hidden_dim, 1)
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTMCell(embed_dim + proj_dim, hidden_dim)
        self.out_h, self.out_z = nn.Linear(hidden_dim, embed_dim), nn.Linear(proj_dim, embed_dim)
        self.out = nn.Linear(embed_dim, vocab_size)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("baseline", torch.zeros(()))

    def init_state(self, feats, mask, seed=None) -> State:
        a = self.feat_proj(feats)
        mean = masked_mean(a, mask)
        seed = torch.zeros(len(a), dtype=torch.long, device=a.device) if seed is None else seed.to(a.device)
        state = {"a": a, "a_att": self.att_feat(a), "mask": mask, "h": torch.tanh(self.init_h(mean)),
                 "c": torch.tanh(self.init_c(mean)), "seed": seed, "t": torch.zeros_like(seed)}
        if self.attention == "hard" and self.training:   # Sec. 4.1: the expectation for a random half of the images
            state["expect"] = torch.rand(len(a), device=a.device) < 0.5
        return state

    def soft_expectation(self, state: State) -> State:
        if self.attention != "hard":
            return state
        return {**state, "expect": torch.ones(len(state["a"]), dtype=torch.bool, device=state["a"].device)}

    def cascade(self):
        """Output first: the word layer, what feeds it (h, z), the LSTM and its gate and embedding,
        the attention scorer, the initial state, and the feature projection everything reads."""
        both = lambda *ms: nn.ModuleList(ms)  # noqa: E731
        return [("out", self.out), ("out_h+out_z", both(self.out_h, self.out_z)), ("lstm", self.lstm),
                ("f_beta", self.f_beta), ("embed", self.embed), ("att_score", self.att_score),
                ("att_hidden+att_feat", both(self.att_hidden, self.att_feat)), ("init_h+init_c", both(self.init_h, self.init_c)),
                ("feat_proj", self.feat_proj)]

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        a, h = state["a"], state["h"]
        alpha = steered(state, attend(state["a_att"], self.att_hidden(h), state["mask"], self.att_score))
        sample = sample_logprob = None
        z = torch.bmm(alpha.unsqueeze(1), a).squeeze(1)
        if self.attention == "hard":
            if self.training:
                sample = torch.multinomial(alpha.detach(), 1).squeeze(1)
            else:
                sample = _inverse_cdf(alpha, _hash_uniform(state["seed"], state["t"]))
            sample_logprob = alpha.gather(1, sample[:, None]).squeeze(1).clamp_min(1e-12).log()
            hard = a[torch.arange(len(a), device=a.device), sample]
            if "expect" in state:   # training rows that use the expectation attend softly, no sample
                z = torch.where(state["expect"][:, None], z, hard)
                sample_logprob = sample_logprob.masked_fill(state["expect"], 0.0)
            else:
                z = hard
        beta = torch.sigmoid(self.f_beta(h))
        e = self.embed(words)
        h, c = self.lstm(torch.cat([e, beta * z], dim=1), (h, state["c"]))
        logits = self.out(self.drop(e + self.out_h(h) + self.out_z(z)))
        new_state = {**state, "h": h, "c": c, "t": state["t"] + 1}
        return Step(logits, alpha, beta.squeeze(1), sample, sample_logprob), new_state

    def loss(self, feats, mask, tokens, image_index, targets=None, weights=None):
        logits, steps = self.teacher_forced(feats, mask, tokens, image_index)
        xe, per_token = token_cross_entropy(logits, tokens, weights)
        valid = (tokens[:, 1:].T != 0).float()                       # (T-1, N)
        token_logp = -per_token
        n_tokens = valid.sum()
        logs = {"xe": xe.item()}
        xe = xe + supervision(steps, targets, logs)
        alphas = torch.stack([s.attention for s in steps]) * valid.unsqueeze(-1)   # (T-1, N, K)
        if self.attention == "soft":
            reg = self.alpha_c * ((1.0 - alphas.sum(0)) ** 2).sum(1).mean()
            logs["att_reg"] = reg.item()
            return xe + reg, logs
        entropy = -(alphas * alphas.clamp_min(1e-12).log()).sum(-1).sum() / n_tokens
        loss = xe - self.lambda_e * entropy
        sampled = torch.stack([s.sample_logprob for s in steps]).ne(0).any(0)   # captions of sampling images
        if bool(sampled.any()):
            # REINFORCE: the caption's mean token log-likelihood under the sampled cells is the reward
            reward = ((token_logp.detach() * valid).sum(0) / valid.sum(0))[sampled]
            if self.baseline == 0:   # first sampled batch: start the moving average at the reward
                self.baseline.fill_(reward.mean().item())
            logp_s = (torch.stack([s.sample_logprob for s in steps]) * valid).sum(0)[sampled]
            loss = loss - self.lambda_r * ((reward - self.baseline) * logp_s).sum() / n_tokens
            self.baseline.mul_(0.9).add_(0.1 * reward.mean())
            logs["baseline"] = self.baseline.item()
        logs["entropy"] = entropy.item()
        return loss, logs


def _hash_uniform(seed: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Counter-based uniform numbers in [0, 1): the same on CPU and CUDA for the same (seed, t)."""
    mask = 0xFFFFFFFF
    x = (seed * 0x9E3779B1 + t * 0x85EBCA77 + 0x165667B1) & mask
    for mult in (0x7FEB352D, 0x846CA68B):
        x = ((x ^ (x >> 16)) * mult) & mask
    x = x ^ (x >> 16)
    return (x & 0xFFFFFF).double() / float(1 << 24)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = probs.double().cumsum(1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
    return idx.clamp(max=probs.shape[1] - 1)
