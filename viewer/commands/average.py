"""`average`: a model soup, the (weighted) mean of fine-tunes of one model."""
from __future__ import annotations

NAME = "average"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="average the weights of fine-tunes of one model (a model soup)")
    p.add_argument("models", nargs="+", help="checkpoints of one architecture and vocabulary")
    p.add_argument("--out", required=True, help="where to write the averaged checkpoint (.safetensors)")
    p.add_argument("--weights", nargs="+", type=float, metavar="W",
                   help="one weight per checkpoint, summing to 1 (default: equal). Two checkpoints with weights "
                        "1-a, a interpolate between them (WiSE-FT, Wortsman et al. 2022)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..engine.checkpoints import average, resolve
    lm = average([resolve(m, args.checkpoints) for m in args.models], args.out, args.weights)
    how = "the mean" if args.weights is None else "the weighted mean (" + ", ".join(map(str, args.weights)) + ")"
    print(f"wrote {lm.path}: {how} of {len(args.models)} {lm.meta['model_type']} checkpoints "
          f"(score it with `evaluate --model {lm.path}`, ship it with `--ship NAME`)")
    return 0
