"""`train`: train a decoder on cached features (cross-entropy, or self-critical with --scst), or a
question answering model (vqa-*) on questions generated from captions (`qa-data`, --questions)."""
from __future__ import annotations

import json
import os

from . import options

NAME = "train"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="train a decoder on cached features")
    p.add_argument("--model", required=True, help="model type: sat-soft, sat-hard, updown, transformer, "
                   "updown-copy (copies object words from region labels; warm-start it from updown with --init-from); "
                   "vqa-regions, vqa-grid, vqa-blind, vqa-bow (question answering: needs --questions)")
    p.add_argument("--questions", help="vqa-* models: the questions file `qa-data` wrote")
    p.add_argument("--data", required=True)
    p.add_argument("--out")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-images", type=int, default=32)
    p.add_argument("--lr", type=float, help="learning rate (default 4e-4; vqa-* 1e-3)")
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
    p.add_argument("--hold-out", default="", metavar="CLASSES",
                   help="COCO classes (comma-separated) whose training captions are dropped: the novel-object "
                        "protocol (their words stay in the vocabulary)")
    p.add_argument("--world", metavar="FOLDER", help="a folder `world-data` wrote: its COCO photos' pseudo-captions "
                   "join training and its vocabulary (every COCO class word) replaces the counted one")
    p.add_argument("--coco", metavar="FOLDER", help="with --world: the COCO photos folder (photos.txt, images/)")
    p.add_argument("--gate", type=float, default=1.0,
                   help="with --world: loss weight of a pseudo-caption's words that name no object the detector "
                        "found on the photo (Honda et al.'s word-level gate; default 1: all count fully)")
    p.add_argument("--keep-epochs", action="store_true",
                   help="also save each epoch's weights (epoch-N.safetensors), to choose on other data than dev")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..engine.models import REGISTRY
    from ..training.train import TrainConfig, train
    hparams = json.loads(args.hparams) if args.hparams else {}
    if args.model in REGISTRY and REGISTRY[args.model][0].answers:
        from ..training.train_qa import QAConfig, train_qa
        if not args.questions:
            raise ValueError(f"{args.model} answers questions: give --questions (written by `qa-data`)")
        train_qa(QAConfig(model=args.model, data=args.data, questions=args.questions,
                          out=args.out or os.path.join("runs", args.model), epochs=args.epochs,
                          lr=args.lr or 1e-3, patience=args.patience, seed=args.seed, device=str(options.device(args)),
                          cache=args.cache, resume=args.resume, hparams=hparams))
        return 0
    cfg = TrainConfig(model=args.model, data=args.data, out=args.out or os.path.join("runs", args.model),
                      epochs=args.epochs, batch_images=args.batch_images, lr=args.lr or 4e-4, patience=args.patience,
                      dev_split=args.dev_split, dev_images=args.dev_images, device=str(options.device(args)), cache=args.cache, resume=args.resume,
                      init_from=args.init_from, seed=args.seed, hparams=hparams, scst=args.scst,
                      ground_weight=args.ground_weight, warmup=args.warmup,
                      hold_out=tuple(c.strip() for c in args.hold_out.split(",") if c.strip()),
                      world=args.world, coco=args.coco, gate=args.gate,
                      keep_epochs=args.keep_epochs)
    train(cfg)
    return 0
