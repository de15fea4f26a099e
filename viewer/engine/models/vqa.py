"""Question answering with top-down attention: Up-Down's VQA half (Anderson et al. 2018; Teney et al.,
CVPR 2018, "Tips and Tricks for Visual Question Answering"), and its baselines.

The question is read by a GRU over word embeddings (its last state q); top-down attention over the
K units (detector regions, or the 14x14 grid cells) is a = softmax(w^T gated_tanh([v_i ; q])), with
`glimpses` maps from the same layer (Teney et al.'s multi-glimpse); the attended features and q are
fused by an element-wise product of two gated-tanh projections, and a gated-tanh layer and a linear
one score the answers.

It runs through the one decoding loop like a captioner. The question is the prompt
(`with_prompt`, held in the state); the first step emits the answer, with the map it used as its
attention (each glimpse a head), the next one <end>. So traces, forced scoring, hiding and steering
work for answers as for words.

Baselines, trained the same way: `vqa-blind` reads the question only (its map is uniform and says
so: it does not look); `vqa-bow` is image + bag of words (Zhou et al. 2015): the mean feature, i.e.
a uniform look, and the mean of the question's word embeddings.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..images import AttendsTo
from ..vocab import END, SPECIALS, START
from .base import CaptionModel, State, Step, masked_mean, register, steered

START_ID, END_ID = SPECIALS.index(START), SPECIALS.index(END)   # every vocabulary starts with SPECIALS


class GatedTanh(nn.Module):
    """y = tanh(W x) * sigmoid(W' x) (Teney et al.)."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.value, self.gate = nn.Linear(n_in, n_out), nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.tanh(self.value(x)) * torch.sigmoid(self.gate(x))


@register("vqa-regions")
@register("vqa-blind", look="none")
@register("vqa-bow", look="mean", reader="bag")
class RegionAnswerer(CaptionModel):
    attends_to = AttendsTo.REGIONS
    image_state = ("v", "mask", "q")
    answers = True

    def __init__(self, vocab_size: int, feature_dim: int, question_vocab_size: int, embed_dim: int = 300,
                 hidden_dim: int = 512, glimpses: int = 1, look: str = "attention", reader: str = "gru",
                 dropout: float = 0.3):
        super().__init__()
        if look not in ("attention", "mean", "none") or reader not in ("gru", "bag"):
            raise ValueError(f"look {look!r} / reader {reader!r}: choose attention/mean/none and gru/bag")
        self.look, self.reader, self.glimpses = look, reader, glimpses
        self.word_embed = nn.Embedding(question_vocab_size, embed_dim, padding_idx=0)
        self.gru = nn.GRU(embed_dim, hidden_dim, batch_first=True) if reader == "gru" else None
        self.bag = nn.Linear(embed_dim, hidden_dim) if reader == "bag" else None
        if look == "attention":
            self.att_hidden = GatedTanh(feature_dim + hidden_dim, hidden_dim)
            self.att_score = nn.Linear(hidden_dim, glimpses)
        if look != "none":
            self.v_proj = GatedTanh(feature_dim * (glimpses if look == "attention" else 1), hidden_dim)
        self.q_proj = GatedTanh(hidden_dim, hidden_dim)
        self.classify = nn.Sequential(GatedTanh(hidden_dim, 2 * hidden_dim), nn.Dropout(dropout),
                                      nn.Linear(2 * hidden_dim, vocab_size))
        self.drop = nn.Dropout(dropout)

    def read_question(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) word ids, padding 0 at the end -> (B, hidden) the question's vector."""
        e = self.word_embed(ids)
        lengths = (ids != 0).sum(1).clamp_min(1)
        if self.reader == "bag":
            return torch.relu(self.bag(e.sum(1) / lengths.unsqueeze(1).to(e.dtype)))
        packed = nn.utils.rnn.pack_padded_sequence(e, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return self.gru(packed)[1][0]

    def look_at(self, v: torch.Tensor, mask: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """(B, glimpses, K) the maps the answer reads: attention, or uniform over what may be seen."""
        if self.look != "attention":
            uniform = mask.to(v.dtype) / mask.sum(1, keepdim=True).clamp_min(1)
            return uniform.unsqueeze(1).expand(-1, self.glimpses, -1)
        x = torch.cat([v, q.unsqueeze(1).expand(-1, v.shape[1], -1)], dim=-1)
        e = self.att_score(self.drop(self.att_hidden(x))).transpose(1, 2)
        return F.softmax(e.masked_fill(~mask.unsqueeze(1), float("-inf")), dim=-1)

    def answer(self, v, mask, q, maps=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Answer scores (B, V) and the maps (B, glimpses, K) they came from (`maps`: given ones)."""
        maps = self.look_at(v, mask, q) if maps is None else maps
        fused = self.q_proj(q)
        if self.look == "mean":
            fused = fused * self.v_proj(masked_mean(v, mask))
        elif self.look == "attention":
            fused = fused * self.v_proj(torch.bmm(maps, v).flatten(1))
        return self.classify(self.drop(fused)), maps

    def loss_on(self, feats, mask, questions, answers) -> torch.Tensor:
        """Training: cross-entropy of the answers (one per question, a row of `feats` each)."""
        logits, _ = self.answer(feats, mask, self.read_question(questions))
        return F.cross_entropy(logits, answers)

    def init_state(self, feats, mask, seed=None) -> State:
        return {"v": feats, "mask": mask}

    def with_prompt(self, state: State, question: torch.Tensor) -> State:
        """The state with the question (B, L word ids of the question vocabulary) read into it."""
        return {**state, "q": self.read_question(question.to(state["v"].device))}

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        if "q" not in state:
            raise ValueError("a question answering model needs a question")
        maps = self.look_at(state["v"], state["mask"], state["q"])
        if "steer" in state:      # steering: answer while looking where the caller says
            maps = steered(state, maps[:, 0]).unsqueeze(1).expand_as(maps)
        logits, maps = self.answer(state["v"], state["mask"], state["q"], maps)
        logits = logits.clone()
        logits[:, :len(SPECIALS)] = float("-inf")          # <pad> <start> <end> <unk> are no answers
        ended = torch.full_like(logits, float("-inf"))
        ended[:, END_ID] = 0.0
        logits = torch.where((words == START_ID).unsqueeze(1), logits, ended)   # the answer, then <end>
        heads = maps.unsqueeze(1) if self.glimpses > 1 else None                # each glimpse a head
        return Step(logits, maps.mean(1), heads=heads), state

    def with_mask(self, state: State, mask: torch.Tensor) -> State:
        return {**state, "mask": mask}

    def cascade(self):
        parts = [("classify", self.classify), ("q_proj", self.q_proj)]
        parts += [("v_proj", self.v_proj)] if self.look != "none" else []
        parts += [("att_score", self.att_score), ("att_hidden", self.att_hidden)] if self.look == "attention" else []
        return parts + [("question reader", self.gru if self.reader == "gru" else self.bag), ("word_embed", self.word_embed)]


@register("vqa-grid", glimpses=2)
class GridAnswerer(RegionAnswerer):
    """The same over the 14x14 encoder cells the SAT models read, with two glimpses (its map is drawn
    as SAT's: the mean of the glimpses, each glimpse a head)."""

    attends_to = AttendsTo.GRID
