"""A loaded model and the error for a file that is not one: below both checkpoints.py and the
loaders it calls (models/hf.py), so neither imports the other to share them."""
from __future__ import annotations

import torch

from .images import AttendsTo
from .models.base import CaptionModel
from .vision import SPEC, ImageFeatures, VisionSpec, model_inputs
from .vocab import Vocabulary, tokenize


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint; the message says why."""


class LoadedModel:
    """A decoder ready to run, with its vocabulary and metadata."""

    image_encoder = None   # a model that brings its own photo encoder (hf: ViTs) sets it; the pipeline runs it

    def __init__(self, model: CaptionModel, vocab: Vocabulary, meta: dict, path: str = "",
                 encoder_tensors: dict[str, torch.Tensor] | None = None):
        self.model, self.vocab, self.meta, self.path = model, vocab, meta, path
        self.encoder_tensors = encoder_tensors or {}

    def question_ids(self, questions: list[str]) -> torch.Tensor:
        """A question answering model's questions as its question vocabulary's ids, padded with 0; a
        question of no word it knows is refused (it would answer an empty question, as if it had read it)."""
        vocab = Vocabulary(self.meta["question_vocab"])
        ids = [vocab.encode(q) or [vocab.unk] for q in questions]
        for q, row in zip(questions, ids):
            if all(i == vocab.unk for i in row):
                raise ValueError(f"{self.name} knows none of the words of {q!r} "
                                 f"(unknown: {', '.join(tokenize(q)) or q}): ask with words of its training questions")
        out = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
        for i, row in enumerate(ids):
            out[i, :len(row)] = torch.tensor(row)
        return out

    @property
    def vision_spec(self) -> VisionSpec:
        """Where this model's inputs come from: ours (the default), its own encoder, or precomputed files."""
        return stored_vision_spec(self.meta)

    @property
    def imported(self) -> bool:
        return self.vision_spec.brings_own_features

    @property
    def name(self) -> str:
        return self.meta["name"]

    @property
    def attends_to(self) -> AttendsTo:
        return self.model.attends_to

    def batch(self, items: list[ImageFeatures], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Photos' features as this decoder's input (B, K, D) and mask (`vision.model_inputs`)."""
        return model_inputs(items, self.attends_to, device, labels=self.model.reads_labels)


def stored_vision_spec(meta: dict) -> VisionSpec:
    """The vision spec in a checkpoint's metadata (ours when it names none)."""
    return VisionSpec.from_json(meta["vision_spec"]) if "vision_spec" in meta else SPEC
