"""Up-Down with a copy path: object words copied from the labels of the regions looked at.

A pointer-generator (See et al., ACL 2017) over the detector's labels, the mechanism LSTM-C (Yao et
al., CVPR 2017) and Neural Baby Talk (Lu et al., CVPR 2018) use to name objects rarely captioned:

    p(w) = (1 - g) P_gen(w) + g copy(w)
    copy(w) = sum_c A_c P_gen(w) / P_gen(words of c)   for the words w that name class c
              + A_0 P_gen(w)

g = p(copy) is predicted from the decoder state and recorded on every step (as SAT's beta is).
A_c is the step's top-down attention summed over the regions the detector labelled c; A_0 is the
attention on regions that name no word (the context regions, classes no caption word names),
which copy nothing and pass the generator's distribution through. Which of a class's words is said
("dog", "dogs", "puppy") is the generator's choice among them; that it is a word of class c comes
from where the step looked. The map that chooses what to copy is the step's one map, so a copied
word comes, by construction, from the regions its map shows.

The labels reach the model as one more feature column, the region's COCO class index
(`vision.model_inputs(labels=True)`; 0: no class). `label_words` (classes x vocabulary, 0/1) says
which words name each class; training fills it from the grounding synonyms and it is saved with
the weights. Everything else is `updown`'s, so the copy model warm-starts from an `updown`
checkpoint (`added` names the parts that start fresh).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..vision.regions import COCO_LABELS
from .base import State, Step, register
from .updown import UpDown


@register("updown-copy")
class UpDownCopy(UpDown):
    reads_labels = True
    added = ("copy_gate", "label_words")   # not in an `updown` checkpoint: a warm start initialises them

    def __init__(self, vocab_size: int, feature_dim: int, hidden_dim: int = 512, **config):
        super().__init__(vocab_size, feature_dim - 1, hidden_dim=hidden_dim, **config)
        self.copy_gate = nn.Linear(2 * hidden_dim, 1)
        nn.init.constant_(self.copy_gate.bias, -2.0)   # p(copy) starts near 0.12: a warm start begins as its updown
        self.register_buffer("label_words", torch.zeros(len(COCO_LABELS), vocab_size))

    def init_state(self, feats, mask, seed=None) -> State:
        state = super().init_state(feats[..., :-1], mask, seed)
        state["labels"] = feats[..., -1].round().long().clamp(0, len(COCO_LABELS) - 1)
        return state

    @property
    def image_state(self) -> tuple[str, ...]:
        return (*super().image_state, "labels")

    def cascade(self):
        return [("copy_gate", self.copy_gate), *super().cascade()]

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        alpha, h2, new = self.attend_and_read(state, words)
        gen = torch.softmax(self.out(self.drop(h2)).float(), dim=-1)                       # (B, V)
        gate = torch.sigmoid(self.copy_gate(torch.cat([h2, new["h1"]], dim=1))).squeeze(1)  # (B,)
        on_class = torch.zeros(len(alpha), len(COCO_LABELS), dtype=alpha.dtype, device=alpha.device)
        on_class = on_class.scatter_add(1, state["labels"], alpha)                       # (B, classes): A_c
        names = self.label_words.to(gen.dtype)                                           # (classes, V)
        named = names.any(-1)                                                            # classes that name words
        # each class copies its words in the generator's proportions among them
        share = on_class * named / (gen @ names.T).clamp_min(1e-12)
        copy = gen * (share @ names + (on_class * ~named).sum(-1, keepdim=True))
        p = (1 - gate).unsqueeze(1) * gen + gate.unsqueeze(1) * copy
        return Step(p.clamp_min(1e-12).log(), alpha, copy=gate), new
