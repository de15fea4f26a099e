"""Bottom-Up and Top-Down attention (Anderson et al. 2018), captioning decoder.

Two LSTMs per step: the attention LSTM reads [language h, mean region feature, word embedding]
and drives additive attention over the K region features; the language LSTM reads
[attended feature, attention h] and predicts the word. Trained with cross-entropy.

Three variants share this code, differing only where the published implementations differ:
`updown` (ours) embeds the region features and averages the embeddings; `updown-ruotianluo`
(self-critical.pytorch) also puts a ReLU on word embeddings and embeds the mean of the raw
features with its own layer; `updown-poojahira` attends over the raw features with ReLU scoring.

Hiding a region (occlusion, faithfulness.py) takes it out of the mask: out of the attention and out
of the mean feature. That holds per region, not per pixel: every image also has the 5 context
regions (whole image and quarters, vision/boxes.py CONTEXT), whose features are pooled from the same
grid, so the pixels of a hidden detection still reach the model through the context regions that
cover it unless those are hidden too. And the attention LSTM reads the mean feature at EVERY step,
not only at the start: `decode(init_mask=...)` (faithfulness `keep_mean`) therefore keeps the hidden
regions in the mean at every step here, where for the SAT models it only touches the initial state.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..images import AttendsTo
from .base import ACTIVATIONS, CaptionModel, State, Step, attend, masked_mean, register, steered


def _embedding(n_in: int, n_out: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU(), nn.Dropout(dropout))


@register("updown")
@register("updown-ruotianluo", embed_mean=True, word_relu=True)
@register("updown-poojahira", embed_features=False, attention_activation="relu")
class UpDown(CaptionModel):
    attends_to = AttendsTo.REGIONS

    def __init__(self, vocab_size: int, feature_dim: int, embed_dim: int = 256, hidden_dim: int = 512,
                 att_dim: int = 256, dropout: float = 0.5, embed_features: bool = True, embed_mean: bool = False,
                 word_relu: bool = False, attention_activation: str = "tanh"):
        super().__init__()
        self.embed_features, self.embed_mean, self.word_relu = embed_features, embed_mean, word_relu
        self.att_act = ACTIVATIONS[attention_activation]
        v_dim = hidden_dim if embed_features else feature_dim
        if embed_features:
            self.feat_embed = _embedding(feature_dim, hidden_dim, dropout)
        if embed_mean:
            self.mean_embed = _embedding(feature_dim, hidden_dim, dropout)
        mean_dim = hidden_dim if embed_mean else v_dim
        self.att_feat, self.att_hidden = nn.Linear(v_dim, att_dim), nn.Linear(hidden_dim, att_dim)
        self.att_score = nn.Linear(att_dim, 1)
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.att_lstm = nn.LSTMCell(hidden_dim + mean_dim + embed_dim, hidden_dim)
        self.lang_lstm = nn.LSTMCell(v_dim + hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, vocab_size)
        self.drop = nn.Dropout(dropout)
        self.hidden_dim = hidden_dim

    def init_state(self, feats, mask, seed=None) -> State:
        v = self.feat_embed(feats) if self.embed_features else feats
        v_mean = self.mean_embed(masked_mean(feats, mask)) if self.embed_mean else masked_mean(v, mask)
        zeros = v.new_zeros(len(v), self.hidden_dim)
        state = {"v": v, "v_att": self.att_feat(v), "v_mean": v_mean, "mask": mask,
                 "h1": zeros, "c1": zeros, "h2": zeros, "c2": zeros}
        if self.embed_mean:   # its mean is of the raw features: kept to recompute it under another mask
            state["feats"] = feats
        return state

    @property
    def image_state(self) -> tuple[str, ...]:
        return ("v", "v_att", "v_mean", "mask", *(("feats",) if self.embed_mean else ()))

    def with_mask(self, state: State, mask: torch.Tensor) -> State:
        """The mask and the mean feature (read at every step) under it."""
        v_mean = self.mean_embed(masked_mean(state["feats"], mask)) if self.embed_mean else masked_mean(state["v"], mask)
        return {**state, "mask": mask, "v_mean": v_mean}

    def cascade(self):
        """Output first: the word layer, the language LSTM, the attention over regions, the attention
        LSTM and word embedding, then the feature embeddings everything reads."""
        parts = [("out", self.out), ("lang_lstm", self.lang_lstm), ("att_score", self.att_score),
                 ("att_hidden+att_feat", nn.ModuleList([self.att_hidden, self.att_feat])), ("att_lstm", self.att_lstm),
                 ("embed", self.embed)]
        parts += [("mean_embed", self.mean_embed)] if self.embed_mean else []
        return parts + ([("feat_embed", self.feat_embed)] if self.embed_features else [])

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        alpha, h2, state = self.attend_and_read(state, words)
        return Step(self.out(self.drop(h2)), alpha), state

    def attend_and_read(self, state: State, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, State]:
        """One step up to the word layer: the attention over regions (alpha) and the language LSTM's
        output h2, with the next state (updown_copy.py reads alpha and h2 again to copy labels)."""
        e = self.embed(words)
        if self.word_relu:
            e = self.drop(torch.relu(e))
        h1, c1 = self.att_lstm(torch.cat([state["h2"], state["v_mean"], e], dim=1), (state["h1"], state["c1"]))
        alpha = steered(state, attend(state["v_att"], self.att_hidden(h1), state["mask"], self.att_score, self.att_act))
        v_hat = torch.bmm(alpha.unsqueeze(1), state["v"]).squeeze(1)
        h2, c2 = self.lang_lstm(torch.cat([v_hat, h1], dim=1), (state["h2"], state["c2"]))
        return alpha, h2, {**state, "h1": h1, "c1": c1, "h2": h2, "c2": c2}
