"""One teacher-forcing path, by token ids, for every model.

`forced` runs given token sequences (ids ending with <end>, as a trace's `token_ids`) through a
decoder on its features and returns each token's log-probability and the attention (and every
head's) that emitted it, with gradients when the caller enables them. Explanations, pixel-space
faithfulness and visual dependence (analysis/explain.py) all score words this way, so nothing
re-tokenises a caption's text. A model forces in its own way (`CaptionModel.teacher_forced`: the
transformer all steps at once, the others step by step); sat-hard's soft expectation is the
`soft` option, not a second loop; hiding units at one step (feature faithfulness) is the `hide`
option, and `init_mask` lets the initial state see more than the steps; `seeds` replay a sampled decode's drawn cells (SCST's policy
gradient covers them: `Forced.cells`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Forced:
    logprobs: torch.Tensor            # (N, T) log p of each forced token
    attention: torch.Tensor           # (N, T, K) the attention that emitted it
    heads: torch.Tensor | None        # (N, T, layers, heads, K) multi-head models
    cells: torch.Tensor | None        # (N, T) log alpha of each drawn cell (stochastic attention)
    top: torch.Tensor                 # (N, T) the most likely token after each forced prefix: what greedy would say


def forced(model, feats: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor, vocab, soft: bool = False,
           seeds: torch.Tensor | None = None, init_mask: torch.Tensor | None = None,
           hide: tuple[int, torch.Tensor] | None = None, prompt: torch.Tensor | None = None) -> Forced:
    """`tokens` (N, T): row i forced on feats[i] (no <start>: it is fed first). <pad> and <start> get
    no probability, as in decoding. `soft`: stochastic attention as its expectation; `seeds` (N,):
    the cells' seeds (decoding's `seeds`); `init_mask`, `hide`, `prompt` (a question answering model's
    questions, one row per row): as `CaptionModel.teacher_forced`."""
    n = feats.shape[0]
    inputs = torch.cat([torch.full((n, 1), vocab.start, dtype=torch.long, device=tokens.device), tokens], 1)
    logits, steps = model.teacher_forced(feats, mask, inputs, torch.arange(n, device=feats.device), soft=soft,
                                         seeds=seeds, init_mask=init_mask, hide=hide, prompt=prompt)
    banned = torch.tensor([vocab.pad, vocab.start], device=logits.device)
    logp = F.log_softmax(logits.transpose(0, 1).float().index_fill(-1, banned, float("-inf")), dim=-1)
    heads = torch.stack([s.heads for s in steps], 1) if steps[0].heads is not None else None
    cells = torch.stack([s.sample_logprob for s in steps], 1) if steps[0].sample_logprob is not None else None
    return Forced(logp.gather(-1, tokens[..., None]).squeeze(-1), torch.stack([s.attention for s in steps], 1), heads,
                  cells, logp.argmax(-1))
