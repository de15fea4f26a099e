"""ruotianluo/self-critical.pytorch (and ImageCaptioning.pytorch): Up-Down `model.pth` + `infos_*.pkl`.

`infos` (read with the restricted unpickler) holds `opt` (an argparse.Namespace) and `vocab`
{'1': word, ...}; id 0 is both the first input and the end-of-caption output, and rare words
are the word 'UNK'. The model ran on bottom-up Faster R-CNN region features (Visual Genome),
which need to be supplied as precomputed files.
"""
from __future__ import annotations

import torch

from ..engine.safe_pickle import load as safe_load
from .common import ConversionError, Imported, bottom_up_features, rename

RENAMES = {"embed.0.": "embed.", "fc_embed.0.": "mean_embed.0.", "att_embed.0.": "feat_embed.0.",
           "ctx2att.": "att_feat.", "core.attention.h2att.": "att_hidden.", "core.attention.alpha_net.": "att_score.",
           "core.att_lstm.": "att_lstm.", "core.lang_lstm.": "lang_lstm.", "logit.": "out."}


def matches(obj) -> bool:
    return isinstance(obj, dict) and any(str(k).removeprefix("module.").startswith("core.att_lstm.") for k in obj)


def convert(obj: dict, infos: str | None = None, **_) -> Imported:
    if not infos:
        raise ConversionError("self-critical.pytorch models keep their vocabulary and options in infos_*.pkl: "
                              "pass --infos")
    info = safe_load(infos)
    opt, vocab = getattr(info.get("opt"), "__dict__", {}), info.get("vocab")
    if not isinstance(vocab, dict):
        raise ConversionError(f"{infos}: no 'vocab' dict in it")
    if opt.get("caption_model") not in ("updown", "topdown"):
        raise ConversionError(f"{infos}: caption_model is {opt.get('caption_model')!r}; only updown/topdown import")
    unsupported = {k: opt[k] for k in ("use_bn", "use_box", "norm_att_feat") if opt.get(k)}
    if unsupported or opt.get("logit_layers", 1) != 1:
        raise ConversionError(f"{infos}: options not supported by the viewer: {unsupported or 'logit_layers > 1'}")
    decoder = rename({k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}, RENAMES)
    rows = {("<unk>" if w == "UNK" else w): int(i) for i, w in vocab.items()}
    rows_in, rows_out = {**rows, "<start>": 0}, {**rows, "<end>": 0}
    hparams = {"feature_dim": decoder["feat_embed.0.weight"].shape[1], "embed_dim": decoder["embed.weight"].shape[1],
               "hidden_dim": decoder["att_lstm.weight_hh"].shape[1], "att_dim": decoder["att_feat.weight"].shape[0]}
    return Imported("updown-ruotianluo", hparams, decoder, rows_in, rows_out, "embed.weight", ("out.weight", "out.bias"),
                    bottom_up_features(hparams["feature_dim"]), source={"format": "ruotianluo", "id": opt.get("id"), "iterations": info.get("iter")})
