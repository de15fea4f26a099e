"""sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning: `BEST_checkpoint_*.pth.tar` + `WORDMAP_*.json`.

The checkpoint pickles whole modules: `encoder` (models.Encoder: ResNet children `resnet.0`..`resnet.7`
+ AdaptiveAvgPool2d(14)) and `decoder` (models.DecoderWithAttention). Both arrive as inert
records; their tensors are read out, the ResNet depth is read from the block count. Word map:
<pad>=0, words 1..N, then <unk>, <start>, <end>. Photos: squashed to 256x256, ImageNet-normalised.
"""
from __future__ import annotations

from ..engine.safe_pickle import InertRecord, module_tensors
from ..engine.vision.carried import resnet_spec
from .common import ConversionError, Imported, read_word_map, rename

RENAMES = {"attention.": ""}


def matches(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("encoder"), InertRecord) \
        and isinstance(obj.get("decoder"), InertRecord) and "decode_step" in obj["decoder"].state.get("_modules", {})


def convert(obj: dict, word_map: str | None = None, **_) -> Imported:
    decoder = rename(module_tensors(obj["decoder"]), RENAMES)
    encoder = module_tensors(obj["encoder"])
    layers = resnet_layers(encoder)
    pool = obj["encoder"].state.get("enc_image_size", 14)
    words = read_word_map(word_map, "sgrvinod")
    specials = {"<pad>", "<start>", "<end>", "<unk>"}
    if not specials <= set(words):
        raise ConversionError(f"{word_map}: expected {sorted(specials)} in the word map")
    rows = dict(words)
    hparams = {"feature_dim": decoder["encoder_att.weight"].shape[1], "embed_dim": decoder["embedding.weight"].shape[1],
               "hidden_dim": decoder["init_h.weight"].shape[0], "att_dim": decoder["encoder_att.weight"].shape[0]}
    return Imported("sat-sgrvinod", hparams, decoder, rows, rows, "embedding.weight", ("fc.weight", "fc.bias"),
                    resnet_spec(layers, input_size=256, grid=pool), encoder,
                    {"format": "sgrvinod", "epoch": obj.get("epoch"), "reported_bleu4": obj.get("bleu-4"),
                     "encoder": f"ResNet with blocks {layers} (ImageNet-pretrained, as fine-tuned by the author)"})


def resnet_layers(encoder: dict) -> list[int]:
    """Blocks per stage from keys like `resnet.6.22.conv1.weight` ([3, 4, 23, 3] is ResNet-101)."""
    counts = []
    for stage in range(4, 8):
        blocks = {k.split(".")[2] for k in encoder if k.startswith(f"resnet.{stage}.")}
        if not blocks:
            raise ConversionError("the encoder is not a torchvision ResNet cut before its pooling layer")
        counts.append(len(blocks))
    if "resnet.4.0.conv3.weight" not in encoder:
        raise ConversionError("the encoder's ResNet uses basic blocks (ResNet-18/34); only bottleneck ResNets are supported")
    return counts
