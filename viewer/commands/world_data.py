"""`world-data`: the data for learning COCO's world without COCO's pairs (data/world.py): the
detector's labels of the COCO photos (resumable), a seeded choice part, a vocabulary that can say
every COCO class, and pseudo-captions for the training photos; prints the report."""
from __future__ import annotations

import json

from . import options

NAME = "world-data"


def photos_and_text(p) -> None:
    """The COCO photos and the two caption corpora (world-data's, and world-eval's for retrieval)."""
    p.add_argument("--coco", required=True, help="the COCO photos folder (photos.txt, images/)")
    p.add_argument("--captions", required=True, help="the COCO captions folder (captions.txt.gz)")
    p.add_argument("--flickr30k", required=True, help="the Flickr30k captions folder (captions.txt.gz)")


def add_parser(sub) -> None:
    from ..data import world
    p = sub.add_parser(NAME, help="labels, split, vocabulary and pseudo-captions for the uncaptioned COCO photos")
    photos_and_text(p)
    p.add_argument("--flickr8k", required=True, 
                   help="the Flickr8k folder (its train captions count for the vocabulary)")
    p.add_argument("--out", required=True, help="the folder to write (labels/ is reused: a rerun resumes)")
    p.add_argument("--threshold", type=float, default=world.THRESHOLD,
                   help=f"detector score a label needs for pseudo-captions (default {world.THRESHOLD})")
    p.add_argument("--seed", type=int, default=world.SEED, 
                   help=f"the split's and the draws' seed (default {world.SEED})")
    p.add_argument("--choice", type=int, default=world.CHOICE_SIZE,
                   help=f"photos kept out of training, to choose on (default {world.CHOICE_SIZE})")
    p.add_argument("--keep", type=int, default=world.KEEP, 
                   help=f"pseudo-captions per photo, at most (default {world.KEEP})")
    p.add_argument("--min-count", type=int, default=world.MIN_COUNT,
                   help=f"how often the text must say a word for the vocabulary (default {world.MIN_COUNT})")
    p.add_argument("--batch", type=int, default=world.BATCH, help=f"photos per labels file (default {world.BATCH})")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..data import world
    from ..engine.vision.regions import RegionDetector
    report = world.build(args.coco, args.captions, args.flickr30k, args.flickr8k, args.out, RegionDetector().detect,
                         threshold=args.threshold, seed=args.seed, choice_size=args.choice, keep=args.keep,
                         min_count=args.min_count, batch=args.batch,
                         log=options.log)
    print(json.dumps(report, indent=1))
    return 0
