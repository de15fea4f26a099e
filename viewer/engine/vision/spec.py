"""What a model's image features are: the vision spec stored in every checkpoint.

A decoder only works on the features it was trained on, so each checkpoint records them. Ours
come from this code's grid encoder and detector (`vision.SPEC`); an imported model either carries
its own encoder in the checkpoint or reads the user's precomputed feature files. The stored JSON
is the spec's `details` plus, for imported models, a `source` field; its hash (`key`) names the
feature cache and is checked when a checkpoint loads.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum


def spec_key(fields: dict) -> str:
    """A short hash of a spec's JSON fields."""
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


class FeatureSource(StrEnum):
    OURS = "ours"                  # this code's VisionStack (stored without a `source` field)
    CARRIED = "checkpoint"         # an imported model's own grid encoder, stored in its checkpoint
    PRECOMPUTED = "precomputed"    # the user's feature files (--features)


@dataclass(frozen=True)
class VisionSpec:
    source: FeatureSource
    details: dict = field(default_factory=dict)   # encoder, input size, dim ...: whatever defines the features

    @classmethod
    def from_json(cls, fields: dict) -> VisionSpec:
        """The stored form back; ValueError names an unknown source."""
        details = dict(fields)
        source = details.pop("source", FeatureSource.OURS.value)
        try:
            return cls(FeatureSource(source), details)
        except ValueError:
            raise ValueError(f"unknown feature source {source!r}; known: "
                             f"{', '.join(s.value for s in FeatureSource if s != FeatureSource.OURS)}") from None

    def to_json(self) -> dict:
        return dict(self.details) if self.source == FeatureSource.OURS else {"source": self.source.value, **self.details}

    @property
    def key(self) -> str:
        return spec_key(self.to_json())

    @property
    def brings_own_features(self) -> bool:
        """An imported model: its features are not the ones this code computes."""
        return self.source != FeatureSource.OURS
