"""`train`: train a decoder on cached features (cross-entropy, or self-critical with --scst)."""
from __future__ import annotations

import json
import os

from . import options

NAME = "train"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="train a decoder on cached features")
    p.add_argument("--model", required=True, help="model type: sat-soft, sat-hard, updown, transformer")
    p.add_argument("--data", required=True)
    p.add_argument("--out")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-images", type=int, default=32)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--patience", type=int, default=4)
    p.add_argument("--dev-split", default="dev-select",
                   help="split scored each epoch for early stopping (default dev-select: the report half stays unseen)")
    p.add_argument("--dev-images", type=int, default=0, help="score only the first N photos of that split each epoch")
    p.add_argument("--cache", help="feature cache folder (default .cache/features)")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--init-from", help="warm start from a checkpoint of the same architecture")
    p.add_argument("--scst", action="store_true", help="self-critical fine-tuning on CIDEr-D (use with --init-from; "
                                                       "not with --ground-weight)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ground-weight", type=float, default=0.0,
                   help="attention supervision: pull the attention of words naming a detected object into its boxes")
    p.add_argument("--warmup", type=int, default=0, help="batches over which the learning rate rises linearly from 0")
    p.add_argument("--hparams", help='JSON, e.g. \'{"hidden_dim": 512}\'')
    p.set_defaults(func=run)


def run(args) -> int:
    from ..training.train import TrainConfig, train
    hparams = json.loads(args.hparams) if args.hparams else {}
    cfg = TrainConfig(model=args.model, data=args.data, out=args.out or os.path.join("runs", args.model),
                      epochs=args.epochs, batch_images=args.batch_images, lr=args.lr, patience=args.patience,
                      dev_split=args.dev_split, dev_images=args.dev_images, device=str(options.device(args)), cache=args.cache, resume=args.resume,
                      init_from=args.init_from, seed=args.seed, hparams=hparams, scst=args.scst,
                      ground_weight=args.ground_weight, warmup=args.warmup)
    train(cfg)
    return 0
