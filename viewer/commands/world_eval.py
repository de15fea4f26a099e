"""`world-eval`: captions of the COCO choice part (photos with labels and no captions) measured
against the detector (analysis/world_eval.py): proxy CHAIR and recall, with 95% intervals, for each
model plain and guided and for retrieval; writes the report and every caption (for the hand check)."""
from __future__ import annotations

import json
import os

from . import options
from .world_data import photos_and_text

NAME = "world-eval"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="proxy CHAIR and recall on the COCO choice part, for models and retrieval")
    p.add_argument("--world", required=True, help="the folder `world-data` wrote (split, labels)")
    photos_and_text(p)   # the captions: retrieval's corpus
    p.add_argument("--models", required=True, help="comma-separated model names or checkpoint paths")
    p.add_argument("--out", required=True, help="the report (JSON); captions go beside it, in <out>.captions.json")
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--photos", type=int, default=0, help="only the first N choice photos (0: all)")
    p.add_argument("--cache", help="feature cache folder (default .cache/features)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.evaluate import CHUNK, caption_text, guided_generate
    from ..analysis.guide import MOST, NO_REPEAT, RULE_OUT, THRESHOLD
    from ..analysis.world_eval import photo_row, proxy_block, retrieval_captions
    from ..data import world
    from ..data.cache import FeatureCache
    from ..engine.decoding import DecodeSettings

    with open(os.path.join(args.world, "split.json"), encoding="utf-8") as f:
        ids = json.load(f)["choice"]
    ids = ids[: args.photos] if args.photos else ids
    by_id = {world.photo_id(p): p for p in world.coco_photos(args.coco)}
    labels = world.load_labels(args.world)
    missing = [i for i in ids if i not in by_id or i not in labels]
    if missing:
        raise ValueError(f"{len(missing)} choice photos have no photo under {args.coco} or no labels in "
                         f"{args.world} (e.g. {missing[0]})")
    captions: dict[str, dict[str, str]] = {}
    corpus = world.Corpus(world.text_captions(args.captions) + world.text_captions(args.flickr30k))
    captions["retrieval"] = retrieval_captions(ids, labels, corpus)
    captioner, cache = options.captioner(args), FeatureCache(args.cache)
    paths = [by_id[i] for i in ids]
    cache.build(paths, captioner.vision)
    settings = DecodeSettings(strategy="beam", beam_size=args.beam)
    guide = {"threshold": THRESHOLD, "most": MOST, "rule_out": list(RULE_OUT), "no_repeat": NO_REPEAT}
    for name in args.models.split(","):
        loaded = captioner.model(name)
        for mode, how in (("plain", None), ("guided", guide)):
            found = {}
            for i in range(0, len(paths), CHUNK):
                chunk = paths[i:i + CHUNK]
                hyps = guided_generate(loaded, [cache.load(p) for p in chunk], chunk, settings, captioner.device, how)
                found.update({world.photo_id(p): caption_text(loaded, hyps[p]) for p in chunk})
            captions[f"{name} {mode}"] = found
            options.log(f"{name} {mode}: {len(found)} captions")
    report = {"photos": len(ids), "beam": args.beam, "world": os.path.abspath(args.world),
              "guide": guide, "configurations": {
                  key: proxy_block([photo_row(caps[i], labels[i]) for i in ids]) for key, caps in captions.items()}}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    with open(os.path.splitext(args.out)[0] + ".captions.json", "w", encoding="utf-8") as f:
        json.dump(captions, f, indent=1, sort_keys=True)
    print(json.dumps(report["configurations"], indent=1))
    return 0
