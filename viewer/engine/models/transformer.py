"""A Transformer caption decoder (Vaswani et al. 2017) over the same 14x14 grid the SAT models use.

Pre-LayerNorm decoder layers: masked self-attention over the words so far, multi-head
cross-attention over the grid cells (projected, plus a learned position per cell), and a
feed-forward block. `encoder_layers` > 0 first runs that many self-attention layers over the
cells. The word embedding is tied to the output layer (as in nanoGPT).

Decoding runs one word at a time through `forward_step` with cached keys and values: the state
holds, per layer, the cells' cross-attention keys/values (computed once in `init_state`) and the
self-attention keys/values of the words so far (one row per beam, so the decoding loop reorders
them like an LSTM's h and c). Training runs the whole caption at once (`teacher_forced`), which
computes the same thing with a causal mask.

What the viewer shows: `Step.heads` is every layer's and head's cross-attention for the word,
and `Step.attention` (the map every view uses) is the mean over the heads of the last layer.
Steering (base.steered) replaces the cross-attention probabilities of EVERY layer and head by the
steered map for that word, so the shown summary is exactly the requested map and no layer looks
anywhere else. (Reweighting only the last layer's heads towards it left the layers below looking
where they liked, and on peaky heads its mean missed the map by 2-7%, up to 30%.) The price: the
heads lose their differences at that step, so steering with the model's own summary map changes the
word's distribution unless the model has one layer of one head.

Hiding (occlusion) takes cells out of the mask of every cross-attention; with `encoder_layers` > 0
also out of the cell encoder's self-attention, and `with_mask` recomputes the encoded memory, so
hiding at one step only (faithfulness `step_only`) does not leak a hidden cell through its neighbours.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..images import AttendsTo
from .base import CaptionModel, State, Step, register



class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with `heads` heads; keys/values are projected separately so a
    decoder can cache them (as (B, S, d) tensors, split into heads only when used)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.proj = (nn.Linear(dim, dim) for _ in range(4))

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.key(x), self.value(x)

    def forward(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor,
                steer: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, d) attends to keys/values (B, S, d) where `allowed` (B or 1, T or 1, S) is True,
        or, given `steer` (B, T, S), with every head's weights replaced by it (steering).
        Returns the output (B, T, d) and the weights (B, heads, T, S), each row summing to 1."""
        split = lambda t: t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(keys), split(values)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        weights = F.softmax(scores.masked_fill(~allowed.unsqueeze(1), float("-inf")), dim=-1)
        if steer is not None:
            weights = steer.unsqueeze(1).to(weights.dtype).expand_as(weights)
        out = (weights @ v).transpose(1, 2).reshape(x.shape)
        return self.proj(out), weights


def feed_forward(dim: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn, self.ffn, self.drop = MultiHeadAttention(dim, heads), feed_forward(dim, dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.drop(self.attn(h, *self.attn.keys_values(h), mask[:, None, :])[0])
        return x + self.ffn(self.norm2(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_attn, self.cross_attn = MultiHeadAttention(dim, heads), MultiHeadAttention(dim, heads)
        self.ffn, self.drop = feed_forward(dim, dropout), nn.Dropout(dropout)

    def forward(self, x, self_kv, causal, cross_kv, mask, steer=None):
        """x (B, T, d): new words; self_kv: keys/values of all words so far (including x's); `steer`
        (B, T, K): where the cross-attention should look instead; returns the output and the cross-attention
        weights (B, heads, T, K)."""
        x = x + self.drop(self.self_attn(self.norm1(x), *self_kv, causal)[0])
        attended, weights = self.cross_attn(self.norm2(x), *cross_kv, mask[:, None, :], steer)
        x = x + self.drop(attended)
        return x + self.ffn(self.norm3(x)), weights


@register("transformer")
class TransformerCaptioner(CaptionModel):
    attends_to = AttendsTo.GRID

    def __init__(self, vocab_size: int, feature_dim: int, dim: int = 256, layers: int = 3, heads: int = 8,
                 encoder_layers: int = 0, cells: int = 196, max_len: int = 64, dropout: float = 0.2,
                 label_smoothing: float = 0.1):
        super().__init__()
        self.label_smoothing, self.max_len = label_smoothing, max_len
        self.feat_proj = nn.Sequential(nn.Linear(feature_dim, dim), nn.LayerNorm(dim), nn.Dropout(dropout))
        self.cell_pos = nn.Parameter(torch.randn(cells, dim) * 0.02)
        self.feature_encoder = nn.ModuleList(EncoderLayer(dim, heads, dropout) for _ in range(encoder_layers))
        self.embed = nn.Embedding(vocab_size, dim)
        self.word_pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def image_state(self) -> tuple[str, ...]:
        return ("mask", *(("feats",) if len(self.feature_encoder) else ()),
                *(f"cross_{kv}{i}" for i in range(len(self.layers)) for kv in "kv"))

    @property
    def relevancy(self) -> bool:   # Chefer et al.'s rules as written here: no encoder layers over the cells
        return not len(self.feature_encoder)

    def cascade(self):
        """Output first. The output projection IS the word embedding (tied), so the first stage
        randomises both, and says so; then the decoder layers top down, positions, the cell encoder."""
        return [("norm+embed (output projection, tied to the word embedding)", nn.ModuleList([self.norm, self.embed])),
                *((f"layers.{i}", self.layers[i]) for i in reversed(range(len(self.layers)))), ("word_pos", self.word_pos),
                *((f"feature_encoder.{i}", self.feature_encoder[i]) for i in reversed(range(len(self.feature_encoder)))),
                ("cell_pos", self.cell_pos), ("feat_proj", self.feat_proj)]

    def memory(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if feats.shape[1] != len(self.cell_pos):
            raise ValueError(f"this transformer was trained on {len(self.cell_pos)} cells, not {feats.shape[1]}")
        m = self.feat_proj(feats) + self.cell_pos
        for layer in self.feature_encoder:
            m = layer(m, mask)
        return m

    def _words(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embed(tokens) + self.word_pos(positions.clamp(max=self.max_len - 1)))

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) @ self.embed.weight.T

    def init_state(self, feats, mask, seed=None) -> State:
        m = self.memory(feats, mask)
        state = {"mask": mask, "t": torch.zeros(len(feats), dtype=torch.long, device=feats.device)}
        empty = m.new_zeros(len(m), 0, m.shape[-1])
        for i, layer in enumerate(self.layers):
            state[f"cross_k{i}"], state[f"cross_v{i}"] = layer.cross_attn.keys_values(m)
            state[f"self_k{i}"], state[f"self_v{i}"] = empty, empty
        if len(self.feature_encoder):   # the encoder mixes cells: kept to encode them again under another mask
            state["feats"] = feats
        return state

    def with_mask(self, state: State, mask: torch.Tensor) -> State:
        state = {**state, "mask": mask}
        if len(self.feature_encoder):
            m = self.memory(state["feats"], mask)
            for i, layer in enumerate(self.layers):
                state[f"cross_k{i}"], state[f"cross_v{i}"] = layer.cross_attn.keys_values(m)
        return state

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        x = self._words(words[:, None], state["t"][:, None])
        new = {**state, "t": state["t"] + 1}
        allowed = torch.ones(1, 1, 1, dtype=torch.bool, device=x.device).expand(-1, -1, state["self_k0"].shape[1] + 1)
        steer = state["steer"][:, None] if "steer" in state else None   # base.steered: every layer and head
        heads = []
        for i, layer in enumerate(self.layers):
            k, v = layer.self_attn.keys_values(layer.norm1(x))
            new[f"self_k{i}"] = torch.cat([state[f"self_k{i}"], k], 1)
            new[f"self_v{i}"] = torch.cat([state[f"self_v{i}"], v], 1)
            x, weights = layer(x, (new[f"self_k{i}"], new[f"self_v{i}"]), allowed,
                               (state[f"cross_k{i}"], state[f"cross_v{i}"]), state["mask"], steer)
            heads.append(weights[:, :, 0])
        heads = torch.stack(heads, 1)                                   # (B, layers, heads, K)
        return Step(self._logits(x[:, 0]), heads[:, -1].mean(1), heads=heads), new

    def teacher_forced(self, feats, mask, tokens, image_index, soft: bool = False, seeds=None, init_mask=None, hide=None,
                       prompt=None):
        """The whole caption in one pass (causal mask); equal to running `forward_step` word by word
        (which hiding at one step, or a separate initial mask, still does)."""
        if init_mask is not None or hide is not None or prompt is not None:
            return super().teacher_forced(feats, mask, tokens, image_index, soft, seeds, init_mask, hide, prompt)
        m = self.memory(feats, mask)
        per_caption = lambda t: t.index_select(0, image_index)  # noqa: E731  (per image first: 5 captions share it)
        inputs = tokens[:, :-1]
        x = self._words(inputs, torch.arange(inputs.shape[1], device=tokens.device)[None])
        causal = torch.ones(inputs.shape[1], inputs.shape[1], dtype=torch.bool, device=x.device).tril()[None]
        heads = []
        for layer in self.layers:
            cross_kv = tuple(per_caption(t) for t in layer.cross_attn.keys_values(m))
            x, weights = layer(x, layer.self_attn.keys_values(layer.norm1(x)), causal, cross_kv, per_caption(mask))
            heads.append(weights)                                       # (N, heads, T, K)
        heads = torch.stack(heads, 1).permute(3, 0, 1, 2, 4)            # (T, N, layers, heads, K)
        steps = [Step(None, h[:, -1].mean(1), heads=h) for h in heads]
        return self._logits(x).transpose(0, 1), steps
