"""Bottom-Up and Top-Down attention (Anderson et al. 2018), captioning decoder.

Two LSTMs per step: the attention LSTM reads [language h, mean region feature, word embedding]
and drives additive attention over the K region features; the language LSTM reads
[attended feature, attention h] and predicts the word. Trained with cross-entropy.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .base import CaptionModel, State, Step, attend, masked_mean, register


@register("updown")
class UpDown(CaptionModel):
    attends_to = "regions"

    def __init__(self, vocab_size: int, feature_dim: int, embed_dim: int = 256, hidden_dim: int = 512,
                 att_dim: int = 256, dropout: float = 0.5):
        super().__init__()
        self.feat_embed = nn.Sequential(nn.Linear(feature_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout))
        self.att_feat, self.att_hidden = nn.Linear(hidden_dim, att_dim), nn.Linear(hidden_dim, att_dim)
        self.att_score = nn.Linear(att_dim, 1)
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.att_lstm = nn.LSTMCell(hidden_dim * 2 + embed_dim, hidden_dim)
        self.lang_lstm = nn.LSTMCell(hidden_dim * 2, hidden_dim)
        self.out = nn.Linear(hidden_dim, vocab_size)
        self.drop = nn.Dropout(dropout)
        self.hidden_dim = hidden_dim

    def init_state(self, feats, mask, seed=None) -> State:
        v = self.feat_embed(feats)
        zeros = v.new_zeros(len(v), self.hidden_dim)
        return {"v": v, "v_att": self.att_feat(v), "v_mean": masked_mean(v, mask), "mask": mask,
                "h1": zeros, "c1": zeros, "h2": zeros, "c2": zeros}

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        x = torch.cat([state["h2"], state["v_mean"], self.embed(words)], dim=1)
        h1, c1 = self.att_lstm(x, (state["h1"], state["c1"]))
        alpha = attend(state["v_att"], self.att_hidden(h1), state["mask"], self.att_score)
        v_hat = torch.bmm(alpha.unsqueeze(1), state["v"]).squeeze(1)
        h2, c2 = self.lang_lstm(torch.cat([v_hat, h1], dim=1), (state["h2"], state["c2"]))
        logits = self.out(self.drop(h2))
        return Step(logits, alpha), {**state, "h1": h1, "c1": c1, "h2": h2, "c2": c2}
