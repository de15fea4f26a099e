"""`import`: convert a community checkpoint into this viewer's format, without running its code."""
from __future__ import annotations

import os

NAME = "import"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="convert a community checkpoint (sgrvinod, AaronCCWong, ruotianluo, "
                                      "poojahira) into this viewer's safe format")
    p.add_argument("path", help="their checkpoint (.pth.tar / .pth); opened without running any code in it")
    p.add_argument("--word-map", help="WORDMAP_*.json (sgrvinod, poojahira) or word_dict.json (AaronCCWong)")
    p.add_argument("--infos", help="infos_*.pkl (ruotianluo)")
    p.add_argument("--encoder-weights", help="torchvision VGG-19 or ResNet-152 weights for an AaronCCWong model")
    p.add_argument("--out", required=True, help="NAME (saved in checkpoints/) or a path")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..community import import_checkpoint
    from ..engine.checkpoints import named_path
    out = args.out if os.path.sep in args.out else named_path(args.out, args.checkpoints)
    path = import_checkpoint(args.path, out, word_map=args.word_map, infos=args.infos,
                             encoder_weights=args.encoder_weights)
    from ..engine import checkpoints
    from ..engine.vision import FeatureSource
    meta = checkpoints.read_meta(path)
    spec = checkpoints.stored_vision_spec(meta)
    needs = spec.details.get("describe") if spec.source == FeatureSource.PRECOMPUTED else None
    print(f"wrote {path} ({meta['model_type']}, vocabulary {len(meta['vocab'])})"
          + (f"; it runs on precomputed features ({needs}): pass --features" if needs else ""))
    return 0
