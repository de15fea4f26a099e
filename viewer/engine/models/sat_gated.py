"""Show, Attend and Tell as the two best-known PyTorch ports implement it, for imported checkpoints.

sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning and AaronCCWong/Show-Attend-and-Tell share one
design, which differs from ours (sat.py): attention runs on the raw encoder features (no
projection), the gate is a vector sigmoid(f_beta(h)) over feature channels, and the word comes
from one linear layer on dropout(h). They differ in two places: sgrvinod scores attention with
ReLU and starts the LSTM from linear maps of the mean feature; AaronCCWong uses tanh for both.
Layer names follow sgrvinod's so his state dict loads as it is.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..images import AttendsTo
from .base import ACTIVATIONS, CaptionModel, State, Step, attend, masked_mean, register, steered


@register("sat-sgrvinod", attention_activation="relu", init_activation="none")
@register("sat-aaronccwong", attention_activation="tanh", init_activation="tanh")
class GatedSAT(CaptionModel):
    attends_to = AttendsTo.GRID
    image_state = ("a", "a_att", "mask")

    def __init__(self, vocab_size: int, feature_dim: int = 2048, embed_dim: int = 512, hidden_dim: int = 512,
                 att_dim: int = 512, dropout: float = 0.5, attention_activation: str = "relu",
                 init_activation: str = "none"):
        super().__init__()
        self.att_act, self.init_act = ACTIVATIONS[attention_activation], ACTIVATIONS[init_activation]
        self.encoder_att, self.decoder_att = nn.Linear(feature_dim, att_dim), nn.Linear(hidden_dim, att_dim)
        self.full_att = nn.Linear(att_dim, 1)
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.decode_step = nn.LSTMCell(embed_dim + feature_dim, hidden_dim)
        self.init_h, self.init_c = nn.Linear(feature_dim, hidden_dim), nn.Linear(feature_dim, hidden_dim)
        self.f_beta = nn.Linear(hidden_dim, feature_dim)
        self.fc = nn.Linear(hidden_dim, vocab_size)
        self.dropout = nn.Dropout(dropout)

    def init_state(self, feats, mask, seed=None) -> State:
        mean = masked_mean(feats, mask)   # = the ports' plain mean, unless cells are hidden (occlusion)
        return {"a": feats, "a_att": self.encoder_att(feats), "mask": mask,
                "h": self.init_act(self.init_h(mean)), "c": self.init_act(self.init_c(mean))}

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        h = state["h"]
        alpha = steered(state, attend(state["a_att"], self.decoder_att(h), state["mask"], self.full_att, self.att_act))
        gate = torch.sigmoid(self.f_beta(h))
        z = gate * torch.bmm(alpha.unsqueeze(1), state["a"]).squeeze(1)
        h, c = self.decode_step(torch.cat([self.embedding(words), z], dim=1), (h, state["c"]))
        logits = self.fc(self.dropout(h))
        return Step(logits, alpha, beta=gate.mean(1)), {**state, "h": h, "c": c}
