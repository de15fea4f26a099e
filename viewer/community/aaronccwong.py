"""AaronCCWong/Show-Attend-and-Tell: a decoder `state_dict` (`model_*.pth`) + `word_dict.json`.

Word dict: <start>=0, <eos>=1, <unk>=2, <pad>=3, words from 4. The decoder was trained on a frozen
ImageNet VGG-19 (conv5_4: 14x14x512 at 224x224) or ResNet-152 (layer4: 7x7x2048), whose weights
are not in the file and not available offline: pass torchvision's weights of that network with
--encoder-weights to carry the encoder in the import; without them the model runs on
precomputed grid features only.
"""
from __future__ import annotations

import torch

from ..engine.safe_pickle import load as safe_load
from ..engine.vision.carried import resnet_spec, vgg19_spec
from ..engine.vision.spec import FeatureSource, VisionSpec
from .common import ConversionError, Imported, read_word_map, rename

RENAMES = {"attention.U.": "decoder_att.", "attention.W.": "encoder_att.", "attention.v.": "full_att.",
           "deep_output.": "fc.", "lstm.": "decode_step."}
SPECIALS = {"<start>": "<start>", "<eos>": "<end>", "<unk>": "<unk>", "<pad>": "<pad>"}

ENCODERS = {512: ("VGG-19 conv5_4", 14), 2048: ("ResNet-152 layer4", 7)}
_RESNET_STAGES = {"conv1.": "resnet.0.", "bn1.": "resnet.1.", "layer1.": "resnet.4.", "layer2.": "resnet.5.",
                  "layer3.": "resnet.6.", "layer4.": "resnet.7."}


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
    if dim not in ENCODERS:
        raise ConversionError(f"this decoder reads {dim}-d features; known encoders: VGG-19 (512), ResNet-152 (2048)")
    network, grid = ENCODERS[dim]
    source = {"format": "aaronccwong", "encoder": network}
    if encoder_weights:
        encoder, spec = _encoder(safe_load(encoder_weights), dim, encoder_weights)
        source["encoder"] += f" from {encoder_weights}"
    else:
        encoder, spec = {}, VisionSpec(FeatureSource.PRECOMPUTED, {
            "features": "grid", "dim": dim, "describe": f"{network} at 224x224, {grid * grid} x {dim} per photo"})
    return Imported("sat-aaronccwong", hparams, decoder, rows, rows, "embedding.weight", ("fc.weight", "fc.bias"),
                    spec, encoder, source)



def _encoder(state: dict, dim: int, path: str) -> tuple[dict, VisionSpec]:
    """torchvision weights of the network the decoder was trained on -> our carried encoder."""
    if dim == 512:
        encoder = {k: v.float() for k, v in state.items() if k.startswith("features.")}
        if "features.34.weight" not in encoder:
            raise ConversionError(f"{path}: not torchvision VGG-19 weights (no features.34.weight)")
        return encoder, vgg19_spec()
    encoder = rename({k: v for k, v in state.items() if not k.startswith("fc.")}, _RESNET_STAGES)
    if "resnet.6.35.conv1.weight" not in encoder:
        raise ConversionError(f"{path}: not torchvision ResNet-152 weights (no layer3.35)")
    return encoder, resnet_spec([3, 8, 36, 3], input_size=224, grid=7)
