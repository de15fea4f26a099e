"""poojahira/image-captioning-bottom-up-top-down: `BEST_checkpoint_*.pth.tar` + `WORDMAP_*.json`.

The decoder is a pickled models.DecoderWithAttention whose linear layers use weight norm
(weight_g / weight_v, folded back into plain weights here); it attends over the raw 2048-d
bottom-up region features, which need to be supplied as precomputed files. Word map as sgrvinod's.
The auxiliary head `fc1` (trained jointly, unused when captioning) is dropped.
"""
from __future__ import annotations

from ..engine.safe_pickle import InertRecord, module_tensors
from .common import Imported, bottom_up_features, read_word_map, rename

RENAMES = {"attention.features_att.": "att_feat.", "attention.decoder_att.": "att_hidden.",
           "attention.full_att.": "att_score.", "embedding.": "embed.", "top_down_attention.": "att_lstm.",
           "language_model.": "lang_lstm.", "fc.": "out."}


def matches(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("decoder"), InertRecord) \
        and "top_down_attention" in obj["decoder"].state.get("_modules", {})


def convert(obj: dict, word_map: str | None = None, **_) -> Imported:
    decoder = rename(module_tensors(obj["decoder"]), RENAMES, drop=("fc1.",))
    rows = dict(read_word_map(word_map, "poojahira"))
    hparams = {"feature_dim": decoder["att_feat.weight"].shape[1], "embed_dim": decoder["embed.weight"].shape[1],
               "hidden_dim": decoder["att_hidden.weight"].shape[1], "att_dim": decoder["att_feat.weight"].shape[0]}
    return Imported("updown-poojahira", hparams, decoder, rows, rows, "embed.weight", ("out.weight", "out.bias"),
                    bottom_up_features(hparams["feature_dim"]), source={"format": "poojahira", "epoch": obj.get("epoch"), "reported_bleu4": obj.get("bleu-4")})
