"""The small interface every decoder implements, and the model registry.

Decoding (greedy, beam, sampling, forced, branching) and training only ever call:
  state = model.init_state(features, mask, seed)     # per-image tensors, batch first
  step, state = model.forward_step(state, words)     # one word for every row of the batch
A state is a dict of tensors whose first dimension is the row, so decoding can reorder or
expand it (beams) without knowing what is inside. A new model is one file + `@register`.

Hiding (occlusion, faithfulness): a unit (cell or region) out of `mask` must reach the model in no
way: not through any attention softmax, nor a mean feature, nor a sampled cell. Every decoder is
tested for that (tests/test_hiding.py: the hidden units' features replaced by random values change
no log-prob and no attention). It holds per UNIT, not per pixel: a cell's feature comes from an
encoder whose receptive field covers its neighbours, and `updown`'s context regions (whole image,
quarters) pool the same grid as the detections they cover.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..images import AttendsTo

State = dict[str, torch.Tensor]
REGISTRY: dict[str, tuple[type, dict]] = {}


def register(name: str, **config):
    """Class decorator: make `name` buildable with `config` as default hyper-parameters."""
    def wrap(cls):
        REGISTRY[name] = (cls, config)
        return cls
    return wrap


def build_model(name: str, **hparams) -> "CaptionModel":
    if name not in REGISTRY:
        raise ValueError(f"unknown model type {name!r}; known: {', '.join(sorted(REGISTRY))}")
    cls, config = REGISTRY[name]
    return cls(**{**config, **hparams})


@dataclass
class Step:
    """What one decoder step produced for every row."""

    logits: torch.Tensor                        # (B, V) next-word scores
    attention: torch.Tensor                     # (B, K) weights used to emit this word; rows sum to 1
    beta: torch.Tensor | None = None            # (B,) SAT's gating scalar
    sample: torch.Tensor | None = None          # (B,) attended cell drawn by hard attention
    sample_logprob: torch.Tensor | None = None  # (B,) log alpha of that cell (training signal)
    heads: torch.Tensor | None = None           # (B, layers, heads, K) multi-head models: every head's weights
    outside: torch.Tensor | None = None         # (B,) weight the summary put outside the K units (a ViT's class token)
    copy: torch.Tensor | None = None            # (B,) p(copy): the weight of words copied from the regions' labels


@dataclass
class AttentionTargets:
    """Weak attention supervision (Liu et al. 2017, "Attention Correctness"): for the words that
    name an object found in the photo, where that object is. Steps run as in `teacher_forced`."""

    inside: torch.Tensor   # (T-1, N, K) the fraction of each cell/region inside the named object's boxes
    valid: torch.Tensor    # (T-1, N) bool: the word emitted at that step names a detected object
    weight: float

    def loss(self, attention: torch.Tensor) -> torch.Tensor:
        """weight * mean over supervised words of -log(attention mass inside the boxes): zero when the
        whole map lies inside, and large when the map is elsewhere."""
        mass = (attention * self.inside).sum(-1).clamp_min(1e-6)
        return -self.weight * (mass.log() * self.valid).sum() / self.valid.sum().clamp_min(1)


def token_cross_entropy(logits: torch.Tensor, tokens: torch.Tensor, weights: torch.Tensor | None = None,
                        label_smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced cross-entropy: (the mean over the emitted tokens, padding left out, of each
    token's loss times its weight; the per-token losses (T-1, N)). `logits` (T-1, N, V), `tokens`
    (N, T), `weights` (N, T-1) or None (all 1: the plain mean)."""
    emitted = tokens[:, 1:].T                                    # (T-1, N)
    per_token = F.cross_entropy(logits.flatten(0, 1), emitted.flatten(), ignore_index=0, reduction="none",
                                label_smoothing=label_smoothing).view_as(emitted)
    valid = emitted != 0
    weighted = per_token if weights is None else per_token * weights.T
    return (weighted * valid).sum() / valid.sum().clamp_min(1), per_token


def steered(state: State, alpha: torch.Tensor) -> torch.Tensor:
    """The attention a step goes on with: its own `alpha`, or the map decoding put in the state
    under "steer" for this one step (steering: what would the model say, looking there?)."""
    return state["steer"].to(alpha.dtype) if "steer" in state else alpha


def hiding_step(model: "CaptionModel", state: State, words: torch.Tensor, mask: torch.Tensor) -> tuple[Step, State]:
    """One step that sees `mask` (one row per state row) instead of the state's own; whatever the
    hiding replaced (`model.with_mask`: the mask, a mean feature) comes back after it."""
    hidden = model.with_mask(state, mask)
    seen = {key: state[key] for key, v in hidden.items() if state.get(key) is not v}
    step, state = model.forward_step(hidden, words)
    return step, {**state, **seen}


def reorder(state: State, rows: torch.Tensor, keep: tuple[str, ...] = ()) -> State:
    """The state's rows in the order `rows`; entries named in `keep` stay as they are."""
    return {k: v if k in keep else v.index_select(0, rows) for k, v in state.items()}


def masked_mean(feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(feats.dtype)
    return (feats * m).sum(1) / m.sum(1).clamp(min=1.0)


ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "none": lambda x: x}   # by name, for hyper-parameters


def attend(keys: torch.Tensor, query: torch.Tensor, mask: torch.Tensor, score: nn.Linear,
           activation=torch.tanh) -> torch.Tensor:
    """Additive (Bahdanau) attention weights over K entries, padding masked out."""
    e = score(activation(keys + query.unsqueeze(1))).squeeze(-1)
    return F.softmax(e.masked_fill(~mask, float("-inf")), dim=-1)


def supervision(steps: list[Step], targets: AttentionTargets | None, logs: dict) -> torch.Tensor | float:
    """The attention supervision term of a loss (0 without targets), logged as `ground`."""
    if targets is None:
        return 0.0
    term = targets.loss(torch.stack([s.attention for s in steps]))
    logs["ground"] = term.item()
    return term


class CaptionModel(nn.Module):
    """A caption decoder: per-image state from features, then one word per `forward_step` for every row."""

    attends_to = AttendsTo.GRID   # or AttendsTo.REGIONS (detector boxes)
    # State entries that are equal for every beam of an image (features, their projections, the
    # mask): beam search never moves a row to another image, so reordering beams leaves them be
    # (copying (beams, K, D) features every step was most of a beam search's time).
    image_state: tuple[str, ...] = ("mask",)
    label_smoothing = 0.0
    reads_labels = False   # its region features end with the detector's class index (vision.model_inputs)
    added: tuple[str, ...] = ()   # parts a warm start from the model it extends initialises afresh
    # What the analysis may rely on, declared (never probed by attribute name):
    relevancy = False          # Chefer et al.'s relevancy rules apply (attention layers over the cells themselves)
    feature_width: int | None = None   # the leading width of a feature row that is the photo's own map (Grad-CAM's
                                       # A); None: the whole row (hf: rows also pack the class token)

    def cascade(self) -> list[tuple[str, "nn.Module | nn.Parameter"]]:
        """The decoder's parts in data-flow order from the OUTPUT back to the input, for the cascading
        randomisation check (Adebayo et al. 2018). A weight shared by two parts (a tied embedding)
        belongs to the first, nearest the output, and its name says so."""
        raise NotImplementedError(f"{type(self).__name__} declares no cascade")

    def soft_expectation(self, state: State) -> State:
        """The state with stochastic attention replaced by its expectation (sat-hard: the context is
        sum_i alpha_i a_i, no drawn cell), so explanations are smooth; a model without it: unchanged."""
        return state

    def init_state(self, feats: torch.Tensor, mask: torch.Tensor, seed: torch.Tensor | None = None) -> State:
        raise NotImplementedError

    answers = False   # a question answerer (models/vqa.py): it decodes only with a prompt

    def with_prompt(self, state: State, prompt: torch.Tensor) -> State:
        """The state with a question read into it (question answering models only)."""
        raise ValueError(f"{type(self).__name__} captions; it takes no question")

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        raise NotImplementedError

    def with_mask(self, state: State, mask: torch.Tensor) -> State:
        """The state with `mask` (one row per state row) as what the next steps may see: the attention
        mask, and whatever else the state derives from the mask and reads at every step (`updown`: the
        mean feature). What is already past (an LSTM's initial state from the mean feature, the words
        so far) stays. Decoding uses it to hide units at one step only (faithfulness, `step_only`)."""
        return {**state, "mask": mask}

    def loss(self, feats, mask, tokens, image_index, targets: AttentionTargets | None = None,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss; the default is cross-entropy under teacher forcing (+ attention supervision).
        `weights` (N, T-1): each emitted token's weight (None: all 1)."""
        logits, steps = self.teacher_forced(feats, mask, tokens, image_index)
        xe, _ = token_cross_entropy(logits, tokens, weights, self.label_smoothing)
        logs = {"xe": xe.item()}
        return xe + supervision(steps, targets, logs), logs

    def teacher_forced(self, feats, mask, tokens, image_index, soft: bool = False, seeds: torch.Tensor | None = None,
                       init_mask: torch.Tensor | None = None, hide: tuple[int, torch.Tensor] | None = None,
                       prompt: torch.Tensor | None = None) -> tuple[torch.Tensor, list[Step]]:
        """Run the decoder on ground-truth captions.

        tokens (N, T) start with <start>, end with <end>, then padding (id 0); `image_index` maps
        caption rows to images, so per-image work in `init_state` is done once per image, not
        once per caption; `soft`: stochastic attention as its expectation (`soft_expectation`);
        `seeds` (per image): the seeds of stochastic attention's cells (as decoding's); `init_mask`
        (per image): what the initial state sees, if not `mask`; `hide` = (t, masks per caption):
        step t only sees `masks` (`hiding_step`; feature faithfulness); `prompt` (per image): a question
        answering model's questions (`with_prompt`). All rows run every step (padding is masked in the loss): slicing
        finished rows away each step costs more on a CPU than it saves, because every slice of
        the attention memory becomes a full-size gradient buffer in backward.
        Returns logits (T-1, N, V) and the per-step outputs.
        """
        state = self.init_state(feats, mask if init_mask is None else init_mask, seeds)
        if prompt is not None:
            state = self.with_prompt(state, prompt)
        state = reorder({**state, "mask": mask}, image_index)
        if soft:
            state = self.soft_expectation(state)
        steps = []
        for t in range(tokens.shape[1] - 1):
            if hide is not None and t == hide[0]:
                step, state = hiding_step(self, state, tokens[:, t], hide[1])
            else:
                step, state = self.forward_step(state, tokens[:, t])
            steps.append(step)
        return torch.stack([s.logits for s in steps]), steps
