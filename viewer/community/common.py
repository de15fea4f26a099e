"""What every importer produces, and the two steps they share: vocabulary remapping and saving."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from ..engine import checkpoints
from ..engine.vocab import SPECIALS, Vocabulary
from ..engine.models import build_model
from ..engine.vision.spec import FeatureSource, VisionSpec

NEVER = -1e4   # output bias for a token the original model could not emit: no probability mass


class ConversionError(ValueError):
    """A foreign checkpoint this code cannot convert; the message says why and what to pass."""


@dataclass
class Imported:
    """A foreign model in our terms, before its vocabulary is put in our order.

    `rows_in` / `rows_out` give, for each of our tokens (our special names, their words), its row
    in the original input embedding and output layer. They differ where the original reuses one
    id (ruotianluo: 0 is both the start input and the end output)."""

    model_type: str
    hparams: dict
    tensors: dict[str, torch.Tensor]
    rows_in: dict[str, int]
    rows_out: dict[str, int]
    embedding_key: str
    output_keys: tuple[str, str]
    vision_spec: VisionSpec
    encoder_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    source: dict = field(default_factory=dict)


def bottom_up_features(dim: int) -> VisionSpec:
    """The vision spec of an Up-Down model trained on Visual Genome Faster R-CNN features (supplied by the user)."""
    return VisionSpec(FeatureSource.PRECOMPUTED, {"features": "regions", "dim": dim,
                                                  "describe": "bottom-up Faster R-CNN region features (Visual Genome)"})


def rename(tensors: dict[str, torch.Tensor], renames: dict[str, str], drop: tuple[str, ...] = ()) -> dict:
    """Their parameter names -> ours, by prefix; `drop` prefixes are left out (e.g. auxiliary heads)."""
    out = {}
    for key, value in tensors.items():
        key = key.removeprefix("module.")   # saved from nn.DataParallel
        if key.startswith(drop):
            continue
        for old, new in renames.items():
            if key.startswith(old):
                key = new + key[len(old):]
                break
        out[key] = value.float()
    return out


def read_word_map(path: str | None, needed_for: str) -> dict[str, int]:
    if not path:
        raise ConversionError(f"{needed_for} checkpoints do not contain their vocabulary: pass --word-map WORDMAP.json")
    try:
        with open(path) as f:
            word_map = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ConversionError(f"{path}: cannot read the word map ({err})") from None
    if not isinstance(word_map, dict) or not all(isinstance(v, int) for v in word_map.values()):
        raise ConversionError(f"{path}: a word map is a JSON object word -> index")
    return word_map


def our_vocabulary(imp: Imported) -> tuple[Vocabulary, dict[str, torch.Tensor]]:
    """Reorder the embedding and output rows into our vocabulary: <pad>, <start>, <end>, <unk>, words."""
    words = SPECIALS + sorted((w for w in imp.rows_in if w not in SPECIALS), key=imp.rows_in.get)
    tensors = dict(imp.tensors)

    def pick(matrix: torch.Tensor, rows: dict[str, int], fill: float) -> torch.Tensor:
        if sorted(set(rows.values())) != list(range(len(matrix))):
            raise ConversionError(f"the vocabulary has {len(set(rows.values()))} distinct indices up to "
                                  f"{max(rows.values())}, but the model has {len(matrix)} rows (0..{len(matrix) - 1}): "
                                  "wrong word map for this checkpoint?")
        src = torch.tensor([rows.get(w, -1) for w in words])
        out = matrix[src.clamp(min=0)].clone()
        out[src < 0] = fill
        return out

    tensors[imp.embedding_key] = pick(tensors[imp.embedding_key], imp.rows_in, 0.0)
    weight, bias = imp.output_keys
    tensors[weight] = pick(tensors[weight], imp.rows_out, 0.0)
    tensors[bias] = pick(tensors[bias].unsqueeze(1), imp.rows_out, NEVER).squeeze(1)
    return Vocabulary(words), tensors


def save_imported(imp: Imported, out: str) -> str:
    """Build our model from the converted weights (which checks every shape) and save it (fp32)."""
    vocab, tensors = our_vocabulary(imp)
    hparams = {**imp.hparams, "vocab_size": len(vocab)}
    model = build_model(imp.model_type, **hparams)
    problems = checkpoints.weight_mismatches(model, tensors)
    if problems:
        raise ConversionError(f"the weights do not fit a {imp.model_type} model ({', '.join(problems[:4])}...)")
    model.load_state_dict(tensors)
    path = out if out.endswith(".safetensors") else out + ".safetensors"
    name = os.path.basename(path)[: -len(".safetensors")]
    checkpoints.save(path, model, vocab, name, imp.model_type, hparams, {"imported_from": imp.source}, half=False,
                     vision_spec=imp.vision_spec, encoder_tensors=imp.encoder_tensors)
    return path
