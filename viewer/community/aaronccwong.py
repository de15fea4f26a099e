"""AaronCCWong/Show-Attend-and-Tell: a decoder `state_dict` (`model_*.pth`) + `word_dict.json`.

Word dict: <start>=0, <eos>=1, <unk>=2, <pad>=3, words from 4. The decoder was trained on a frozen
ImageNet VGG-19 (conv5_4, 14x14x512 at 224x224) or ResNet-152 whose weights are not in the file
and not available offline: pass torchvision's VGG-19 weights with --encoder-weights to carry the
encoder in the import; without them the model runs on precomputed grid features only.
"""
from __future__ import annotations

import torch

from ..safe_pickle import load as safe_load
from ..vision.carried import vgg19_spec
from .common import ConversionError, Imported, read_word_map, rename

RENAMES = {"attention.U.": "decoder_att.", "attention.W.": "encoder_att.", "attention.v.": "full_att.",
           "deep_output.": "fc.", "lstm.": "decode_step."}
SPECIALS = {"<start>": "<start>", "<eos>": "<end>", "<unk>": "<unk>", "<pad>": "<pad>"}


def matches(obj) -> bool:
    return isinstance(obj, dict) and any(str(k).removeprefix("module.") == "deep_output.weight" for k in obj)


def convert(obj: dict, word_map: str | None = None, encoder_weights: str | None = None, **_) -> Imported:
    decoder = rename({k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}, RENAMES)
    words = read_word_map(word_map, "AaronCCWong")
    if not set(SPECIALS) <= set(words):
        raise ConversionError(f"{word_map}: expected {sorted(SPECIALS)} in the word dict")
    rows = {SPECIALS.get(w, w): i for w, i in words.items()}
    dim = decoder["encoder_att.weight"].shape[1]
    hparams = {"feature_dim": dim, "embed_dim": decoder["embedding.weight"].shape[1],
               "hidden_dim": decoder["init_h.weight"].shape[0], "att_dim": decoder["encoder_att.weight"].shape[0]}
    source = {"format": "aaronccwong"}
    if encoder_weights:
        if dim != 512:
            raise ConversionError(f"this decoder reads {dim}-d features (ResNet-152); --encoder-weights takes VGG-19 only")
        state = safe_load(encoder_weights)
        encoder = {k: v.float() for k, v in state.items() if k.startswith("features.")}
        if "features.34.weight" not in encoder:
            raise ConversionError(f"{encoder_weights}: not torchvision VGG-19 weights (no features.34.weight)")
        spec = vgg19_spec()
        source["encoder"] = f"VGG-19 from {encoder_weights}"
    elif dim == 512:
        encoder, spec = {}, {"source": "precomputed", "features": "grid", "dim": 512,
                             "describe": "VGG-19 conv5_4 at 224x224, 196 x 512 per photo"}
    else:
        raise ConversionError(f"this decoder reads {dim}-d features from a ResNet-152 7x7 grid; the viewer shows "
                              "14x14 grids only. Import a VGG-19 model")
    return Imported("sat-aaronccwong", hparams, decoder, rows, rows, "embedding.weight", ("fc.weight", "fc.bias"),
                    spec, encoder, source)
