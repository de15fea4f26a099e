"""Command line: python -m viewer {caption,models,train,average,evaluate,triage,bench,import} ...

Every command that takes a model accepts a name from checkpoints/ or a checkpoint path.
Errors a person can fix (bad photo, unknown model, wrong checkpoint) print one line and exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def _decode_settings(args):
    from .engine.decoding import DecodeSettings
    if args.force is not None:
        return DecodeSettings(strategy="forced", seed=args.seed)
    if args.greedy:
        return DecodeSettings(strategy="greedy", max_len=args.max_len, seed=args.seed)
    if args.sample:
        return DecodeSettings(strategy="sample", temperature=args.temperature, seed=args.seed, max_len=args.max_len)
    return DecodeSettings(strategy="beam", beam_size=args.beam, max_len=args.max_len,
                          length_penalty=args.length_penalty, seed=args.seed)


def _steer_spec(spec: str, attends_to: str) -> tuple[int, tuple[int, ...]]:
    """--steer STEP:ROW,COL (grid) or STEP:REGION (regions) -> (0-based step, (row, col) or (region,))."""
    from .engine.images import AttendsTo
    head, _, tail = spec.partition(":")
    try:
        step, where = int(head), tuple(int(v) for v in tail.split(","))
    except ValueError:
        step, where = 0, ()
    if step < 1 or len(where) not in (1, 2):
        raise ValueError(f"--steer {spec!r}: expected STEP:ROW,COL (grid models) or STEP:REGION (region models), "
                         "STEP counting words from 1")
    if (len(where) == 1) != (attends_to == AttendsTo.REGIONS):
        raise ValueError(f"--steer {spec!r}: this model attends to "
                         + ("regions: give STEP:REGION" if attends_to == AttendsTo.REGIONS else "a grid: give STEP:ROW,COL"))
    return step - 1, where


def _steer_unit(trace, where: tuple[int, ...]) -> tuple[int, str]:
    """The cell or region a --steer place names on this trace, and how to say it."""
    from .engine.images import AttendsTo
    if trace.attends_to == AttendsTo.REGIONS:
        n = len(trace.region_labels)
        if not 0 <= where[0] < n:
            raise ValueError(f"--steer: no region {where[0]} in {trace.image} (it has {n}, numbered from 0)")
        return where[0], f"region {where[0]} ({trace.region_labels[where[0]]})"
    side = trace.grid_side
    row, col = where
    if not (0 <= row < side and 0 <= col < side):
        raise ValueError(f"--steer: cell ({row}, {col}) is outside the {side}x{side} grid (rows and columns from 0)")
    return row * side + col, f"(row {row}, col {col})"


def cmd_caption(args) -> int:
    from .engine.images import ImageError, load_photo
    from .engine.pipeline import Captioner
    from .analysis.faithfulness import trace_faithfulness
    from .analysis.steer import steer, steer_map
    from .analysis.pixel_faithfulness import step_explanations

    if (args.faithfulness or args.explain) and not args.json:
        raise ValueError("--faithfulness and --explain add to the JSON trace: use them with --json")
    methods = _methods(args.explain)
    captioner = Captioner(args.device, checkpoint_dir=args.checkpoints, feature_files=args.features)
    lm = captioner.model(args.model)   # fail early on a bad model or steering spec, before reading photos
    steering = None if args.steer is None else _steer_spec(args.steer, lm.attends_to)
    settings = _decode_settings(args)
    status = 0
    for path in args.images:
        try:
            photo = load_photo(path)
        except ImageError as err:
            print(f"error: {err}", file=sys.stderr)
            status = 2
            continue
        photo.name = path
        if args.force is not None:
            trace = captioner.force([photo], args.model, [args.force], seed=args.seed)[0]
        else:
            trace = captioner.caption([photo], args.model, settings)[0][0]
        if steering is not None:
            unit, where = _steer_unit(trace, steering[1])
            result = steer(captioner, photo, args.model, trace, steering[0], steer_map(trace, unit), settings)
        if args.json:
            shown = trace if steering is None else result.trace
            obj = shown.to_json()
            if args.faithfulness:
                for step, word in zip(obj["steps"], trace_faithfulness(captioner, photo, args.model, shown, levels=())):
                    step.update(drop_top=round(word.drop_top, 4), drop_random=round(word.drop_random, 4))
            if methods:
                for step, more in zip(obj["steps"], step_explanations(captioner, photo, args.model, shown.token_ids,
                                                                      methods, _imputers(args.imputers))):
                    step.update(more)
            print(json.dumps(obj))
            continue
        score = f"  (log p = {sum(s.logprob for s in trace.steps):.2f})" if args.force is not None else ""
        print(f"{path}: {trace.caption}{score}")
        if steering is not None:
            print(f"steered word {result.step + 1} to {where}: p({result.word}) {result.prob_before:.1%} -> "
                  f"{result.prob_after:.1%}; caption: {result.caption}")
    return status


MODEL_COLUMNS = [   # (heading, where in the dev metrics); grounding and faithfulness on the forced references
    ("BLEU-4", ("BLEU-4",)), ("CIDEr", ("CIDEr",)),
    ("pointing", ("grounding", "references_forced", "pointing")),
    ("centre", ("grounding", "references_forced", "pointing_centre_baseline")),
    ("top det.", ("grounding", "references_forced", "pointing_top_detection_baseline")),
    ("off-centre", ("grounding", "references_forced", "pointing_off_centre")),
    ("top det.", ("grounding", "references_forced", "pointing_off_centre_top_detection_baseline")),
    ("mass", ("grounding", "references_forced", "mass_in_box")),
    ("uniform", ("grounding", "references_forced", "mass_uniform_baseline")),
    ("drop top", ("grounding", "faithfulness", "drop_top")),
    ("random", ("grounding", "faithfulness", "drop_random")),
]


def _imputers(text: str) -> tuple[str, ...]:
    from .analysis.explain import IMPUTERS
    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
    unknown = [n for n in names if n not in IMPUTERS]
    if unknown or not names:
        raise ValueError(f"--imputers: choose from {', '.join(IMPUTERS)} (comma-separated)")
    return names


def _methods(text: str | None) -> tuple[str, ...]:
    """--explain occlusion,gradcam -> ("occlusion", "gradcam"), refusing unknown names."""
    from .analysis.explain import METHODS
    methods = tuple(m.strip() for m in (text or "").split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"--explain: unknown method {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    return methods


def _dig(d: dict, keys: tuple):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def cmd_models(args) -> int:
    from .engine import checkpoints
    found = checkpoints.available(args.checkpoints)
    if not found:
        print(f"no checkpoints in {args.checkpoints or ', '.join(checkpoints.MODEL_DIRS)}")
        return 0
    rows = []
    for name, path in found.items():
        try:
            meta = checkpoints.read_meta(path)
        except checkpoints.CheckpointError as err:
            print(f"{name}: unusable: {err}")
            continue
        dev = meta.get("dev_metrics", {})
        size = len(meta["vocab"]) if "vocab" in meta else meta.get("vocab_size")   # hf: folders: config.json's
        if args.json:
            where = os.path.relpath(path.removeprefix(checkpoints.HF_PREFIX))
            print(json.dumps({"name": name, "type": meta["model_type"], "path": where, "vocabulary": size, "dev": dev, "dev_settings": meta.get("dev_settings"),
                              "trained": meta.get("training", {}).get("epochs"), "date": meta.get("date")}))
            continue
        cells = [_dig(dev, keys) for _, keys in MODEL_COLUMNS]
        split = (meta.get("dev_settings") or {}).get("split", "dev")
        rows.append([name, meta["model_type"], str(size), split]
                    + ["-" if c is None else f"{c:g}" for c in cells])
    if args.json or not rows:
        return 0
    head = ["name", "type", "vocab", "scored on"] + [h for h, _ in MODEL_COLUMNS]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print("  ".join(h.ljust(w) if i < 4 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for r in rows:
        print("  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print("Grounding on the references forced through each model, the detector's boxes of the named class as proxies;\n"
          "beside each figure its baselines on the same words: 'centre' always points at the photo's centre, 'top det.'\n"
          "at the highest-scoring detection whatever its label, 'uniform' spreads attention evenly over the model's\n"
          "own cells or regions. 'off-centre': pointing on the words whose boxes miss the centre. 'drop top' / 'random':\n"
          "how much a named word's log-probability falls (nats) when the units holding half its attention, or as many\n"
          "random ones, are hidden. `--json` has every figure with its 95% interval.")
    return 0


def cmd_import(args) -> int:
    from .community import import_checkpoint
    from .engine.checkpoints import named_path
    out = args.out if os.path.sep in args.out else named_path(args.out, args.checkpoints)
    path = import_checkpoint(args.path, out, word_map=args.word_map, infos=args.infos,
                             encoder_weights=args.encoder_weights)
    from .engine import checkpoints
    from .engine.vision import FeatureSource
    meta = checkpoints.read_meta(path)
    spec = checkpoints.stored_vision_spec(meta)
    needs = spec.details.get("describe") if spec.source == FeatureSource.PRECOMPUTED else None
    print(f"wrote {path} ({meta['model_type']}, vocabulary {len(meta['vocab'])})"
          + (f"; it runs on precomputed features ({needs}): pass --features" if needs else ""))
    return 0


def cmd_average(args) -> int:
    from .engine.checkpoints import average, resolve
    lm = average([resolve(m, args.checkpoints) for m in args.models], args.out, args.weights)
    how = "the mean" if args.weights is None else "the weighted mean (" + ", ".join(map(str, args.weights)) + ")"
    print(f"wrote {lm.path}: {how} of {len(args.models)} {lm.meta['model_type']} checkpoints "
          f"(score it with `evaluate --model {lm.path}`, ship it with `--ship NAME`)")
    return 0


def cmd_train(args) -> int:
    from .training.train import TrainConfig, train
    hparams = json.loads(args.hparams) if args.hparams else {}
    cfg = TrainConfig(model=args.model, data=args.data, out=args.out or os.path.join("runs", args.model),
                      epochs=args.epochs, batch_images=args.batch_images, lr=args.lr, patience=args.patience,
                      dev_split=args.dev_split, dev_images=args.dev_images, device=str(_device(args)), cache=args.cache, resume=args.resume,
                      init_from=args.init_from, seed=args.seed, hparams=hparams, scst=args.scst,
                      ground_weight=args.ground_weight, warmup=args.warmup)
    train(cfg)
    return 0


def cmd_evaluate(args) -> int:
    import torch

    from .training.cache import FeatureCache
    from .training.datasets import load_dataset
    from .engine.decoding import DecodeSettings
    from .analysis.evaluate import evaluate_photos, evaluate_split, report_half_seen, write_captions
    from .engine.pipeline import Captioner

    if args.boxes:
        return _evaluate_boxes(args)
    if not args.data:
        raise ValueError("evaluate needs --data (a dataset split) or --boxes (your own boxed photos)")
    captioner = Captioner(args.device, checkpoint_dir=args.checkpoints, feature_files=args.features)
    loaded = captioner.model(args.model)
    if loaded.imported and args.ship:
        raise ValueError(f"{loaded.name} is an imported model; --ship is for models trained here")
    if args.ship:   # score exactly the weights that will ship: rounded to fp16
        with torch.no_grad():
            for tensor in loaded.model.state_dict().values():
                if tensor.is_floating_point():
                    tensor.copy_(tensor.half())
    data = load_dataset(args.data)
    methods = _methods(args.explain)
    if methods:
        from .analysis.explain import available_methods
        can = available_methods(captioner, args.model)
        if not set(methods) <= set(can):
            raise ValueError(f"{loaded.name} has no {', '.join(m for m in methods if m not in can)} maps here "
                             f"(it has: {', '.join(can)}); photo-space maps need an encoder this viewer runs")
    settings = DecodeSettings(strategy="beam", beam_size=args.beam, max_len=args.max_len)
    if loaded.imported:   # its own encoder or precomputed features: from the photos, through the pipeline
        metrics, captions = evaluate_photos(captioner, args.model, data, args.split, settings)
    else:
        metrics, captions = evaluate_split(loaded, data, args.split, FeatureCache(args.cache), settings,
                                           device=captioner.device, vision=captioner.vision, heads=args.heads,
                                           faithfulness=args.faithfulness)
    explain_block = None
    if methods:   # per-word explanation methods on the split's first photos (issue 27)
        from .analysis.explain_eval import explain_report
        paths = data.split(args.split)
        cache = FeatureCache(args.cache)   # filled by evaluate_split; models with their own encoder: detected anew
        regions = None if loaded.imported else [cache.load(p).regions for p in paths[:args.explain_photos or None]]
        explain_block = explain_report(captioner, args.model, data, paths, methods, regions=regions,
                                       photos=args.explain_photos, sanity=args.explain_sanity,
                                       references=args.explain_references, imputers=_imputers(args.imputers),
                                       records=args.explain_out, split=args.split,
                                       log=lambda m: print(m, file=sys.stderr, flush=True))
    plain = os.path.basename(loaded.name.removeprefix("hf-hub:").removeprefix("hf:").rstrip(os.sep)) or "model"   # hf:FOLDER -> FOLDER
    out = args.captions_out or f"captions_{plain}_{args.split}.json"
    write_captions(out, captions)
    seen = report_half_seen(data, args.split)   # held-out photos this evaluation looked at
    if args.ship:
        from .engine.checkpoints import named_path, ship
        target = named_path(args.ship, args.checkpoints)
        ship(loaded, target, args.ship, {"dev_metrics": metrics,
                                        "dev_settings": {"split": args.split, "beam": args.beam, "images": len(captions),
                                                         **seen}})
    result = {"model": loaded.name, "split": args.split, **seen, "images": len(captions), "beam": args.beam, **metrics,
              "captions_file": out}
    if explain_block is not None:
        result["explain"] = explain_block
    if args.json:
        print(json.dumps(result))
    else:
        _print_evaluation(result)
    return 0


def _print_evaluation(result: dict) -> None:
    """evaluate without --json: one line per figure, grounding blocks indented, the explain table last."""
    explained = result.pop("explain", None)
    grounding = result.pop("grounding")
    for k, v in result.items():
        print(f"{k:14s} {v}")
    print(f"grounding      ({grounding.pop('boxes')})")
    heads = grounding.pop("heads_forced", {})
    for which, block in grounding.items():
        print(f"  {which:18s} " + ("  ".join(f"{k} {v}" for k, v in block.items()) if isinstance(block, dict)
                                   else str(block)))
    for which, block in heads.items():
        print(f"  forced, {which:18s} " + "  ".join(f"{k} {v}" for k, v in block.items()))
    if explained is not None:
        from .analysis.explain_eval import explain_table
        print(explain_table(explained))


def _evaluate_boxes(args) -> int:
    """evaluate --boxes FILE.json: grounding of each method's maps against the user's own boxes."""
    from .analysis.user_boxes import evaluate_user_boxes, load_box_file
    from .engine.pipeline import Captioner
    load_box_file(args.boxes)   # a bad file fails here, before any model loads
    captioner = Captioner(args.device, checkpoint_dir=args.checkpoints, feature_files=args.features)
    result = evaluate_user_boxes(captioner, args.model, args.boxes, ("attention", *_methods(args.explain)))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['model']}: {result['boxed_words']} boxed words on {result['photos']} photos ({args.boxes})")
    for method, g in result["grounding"].items():
        print(f"  {method:10s} pointing {g['pointing']} {g['pointing_ci']} (centre {g['pointing_centre_baseline']}), "
              f"off-centre {g['pointing_off_centre']} ({g['off_centre_words']} words), mass in box {g['mass_in_box']} "
              f"(uniform {g['mass_uniform_baseline']})")
    return 0


def cmd_triage(args) -> int:
    import glob
    from .training.datasets import load_dataset
    from .engine.decoding import DecodeSettings
    from .engine.pipeline import Captioner
    from .analysis.triage import rank, triage, write_report

    if bool(args.data) == bool(args.images):
        raise ValueError("give either --data DIR (with --split) or --images FOLDER")
    references = None
    if args.data:
        data = load_dataset(args.data)
        paths = data.split(args.split)
        references = {p: data.captions[p] for p in paths}
    else:
        paths = sorted(p for ext in ("jpg", "jpeg", "png") for p in glob.glob(os.path.join(args.images, f"*.{ext}")))
    paths = paths[: args.limit] if args.limit else paths
    captioner = Captioner(args.device, checkpoint_dir=args.checkpoints, feature_files=args.features)
    captioner.model(args.model)
    rows = rank(triage(captioner, args.model, paths, references, DecodeSettings(beam_size=args.beam),
                       log=lambda m: print(m, file=sys.stderr)), args.sort)
    name = f"{os.path.basename(args.model).split('.')[0]}-{args.split if args.data else os.path.basename(os.path.normpath(args.images))}"
    out = write_report(rows, args.out or os.path.join("triage", name), args.model, args.sort)
    print(json.dumps(out))
    return 0


def cmd_bench(args) -> int:
    import glob
    from .measure import bench
    from .engine.checkpoints import available, read_meta, stored_vision_spec
    from .paths import ASSETS
    images = args.images or [ASSETS]
    paths = []
    for item in images:
        paths += sorted(glob.glob(os.path.join(item, "*.jpg"))) if os.path.isdir(item) else [item]
    models = args.models or [name for name, path in available(args.checkpoints).items()
                             if not stored_vision_spec(read_meta(path)).brings_own_features]
    result = bench.run(models, paths, args.device, repeats=args.repeats, beam=args.beam,
                       checkpoint_dir=args.checkpoints, explain=args.explain)
    if args.startup:
        result["startup"] = bench.startup(args.checkpoints)
    print(json.dumps(result, indent=1) if args.json else bench.table(result))
    return 0


def _device(args):
    from .engine.device import pick_device
    return pick_device(args.device)


def _caption_parser(sub) -> None:
    p = sub.add_parser("caption", help="caption photos")
    p.add_argument("images", nargs="+")
    p.add_argument("--model", default="sat-soft", help="model name or checkpoint path")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--beam", type=int, default=3)
    mode.add_argument("--greedy", action="store_true")
    mode.add_argument("--sample", action="store_true")
    mode.add_argument("--force", metavar="CAPTION", help="score this caption instead of generating one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-len", type=int, default=20)
    p.add_argument("--length-penalty", type=float, default=0.0)
    p.add_argument("--json", action="store_true", help="one JSON trace per image (schema in README)")
    p.add_argument("--features", help="precomputed features for imported models (.tsv, .hdf5 or folder of .npz)")
    p.add_argument("--steer", metavar="STEP:ROW,COL", help="make word STEP (from 1) attend to grid cell ROW,COL "
                   "(from 0), or to region STEP:REGION (region models), and decode on from there; "
                   "--json prints that decode, its steered step marked")
    p.add_argument("--faithfulness", action="store_true",
                   help="with --json: every step gets drop_top / drop_random, the drop of its word's log-probability "
                        "(nats) when the units holding the top half of its attention, or as many random ones, are hidden")
    p.add_argument("--explain", metavar="METHODS", help="with --json: every step gets 'explain' {method: 14x14 map} "
                   "for these methods (attention, occlusion, gradcam, relevancy, superpixels, kernelshap, "
                   "occlusion-fine; comma-separated) and, per imputer, each map's pixel-space deletion AUC and gap "
                   "(blur_gap; road = ROAD) and the word's visual dependence")
    p.add_argument("--imputers", default="blur", metavar="NAMES",
                   help="with --explain: what hidden pixels become when maps are scored: blur, road (ROAD's noisy "
                        "linear imputation) or blur,road (default blur)")
    p.set_defaults(func=cmd_caption)


def _models_parser(sub) -> None:
    p = sub.add_parser("models", help="list available models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)


def _train_parser(sub) -> None:
    p = sub.add_parser("train", help="train a decoder on cached features")
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
    p.set_defaults(func=cmd_train)


def _average_parser(sub) -> None:
    p = sub.add_parser("average", help="average the weights of fine-tunes of one model (a model soup)")
    p.add_argument("models", nargs="+", help="checkpoints of one architecture and vocabulary")
    p.add_argument("--out", required=True, help="where to write the averaged checkpoint (.safetensors)")
    p.add_argument("--weights", nargs="+", type=float, metavar="W",
                   help="one weight per checkpoint, summing to 1 (default: equal). Two checkpoints with weights "
                        "1-a, a interpolate between them (WiSE-FT, Wortsman et al. 2022)")
    p.set_defaults(func=cmd_average)


def _evaluate_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="score a model on a dataset split, or against your own boxes")
    p.add_argument("--model", required=True)
    p.add_argument("--data", help="the dataset (required unless --boxes)")
    p.add_argument("--boxes", metavar="FILE.json", help="grounding against your own boxes: FILE maps a photo path to "
                   '{"caption": "...", "boxes": {"dog": [[x1, y1, x2, y2], ...]}} (photo pixels); each caption is '
                   "forced and each method's maps (attention, plus --explain) scored: pointing, mass in box, with "
                   "the centre and uniform baselines and image-level 95%% intervals")
    p.add_argument("--split", default="dev")
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--max-len", type=int, default=20)
    p.add_argument("--cache")
    p.add_argument("--captions-out")
    p.add_argument("--heads", action="store_true", help="multi-head models: grounding of every layer's heads too")
    p.add_argument("--faithfulness", action="store_true",
                   help="how much each forced reference's object words depend on where the model looked "
                        "(hide the top half of the attention vs random units; deletion curves)")
    p.add_argument("--ship", metavar="NAME", help="also save the model as checkpoints/NAME.safetensors (fp16) "
                                                   "with these scores in its metadata")
    p.add_argument("--json", action="store_true")
    p.add_argument("--features", help="precomputed features for imported models (.tsv, .hdf5 or folder of .npz)")
    p.add_argument("--explain", metavar="METHODS", help="comma-separated explanation methods (occlusion, gradcam, "
                   "relevancy, superpixels, kernelshap, occlusion-fine; attention is always the baseline) scored on "
                   "the forced first reference's object words: deletion/LeRF/gap/insertion AUCs under each imputer, "
                   "grounding, sanity check (JSON key 'explain')")
    p.add_argument("--imputers", default="blur,road", metavar="NAMES",
                   help="with --explain: the imputers every map is scored under (default blur,road)")
    p.add_argument("--explain-out", metavar="FILE",
                   help="with --explain: write each photo's record to FILE (JSON lines) as it finishes; run again "
                        "to skip the photos already there (a changed setting is refused)")
    p.add_argument("--explain-photos", type=int, default=0, metavar="N",
                   help="with --explain: only the split's first N photos (0 = all; occlusion and deletion are slow)")
    p.add_argument("--explain-sanity", type=int, default=5, metavar="N",
                   help="with --explain: cascading-randomisation sanity check on the first N photos (default 5)")
    p.add_argument("--explain-references", choices=["first", "all"], default="first",
                   help="with --explain: the first reference caption of each photo, or all of them")
    p.set_defaults(func=cmd_evaluate)


def _triage_parser(sub) -> None:
    p = sub.add_parser("triage", help="rank many photos by score, grounding or confidence; HTML report + CSV")
    p.add_argument("--model", required=True)
    p.add_argument("--data", help="dataset folder or JSON (references give scores)")
    p.add_argument("--split", default="dev")
    p.add_argument("--images", help="a folder of photos instead of a dataset")
    p.add_argument("--sort", choices=["score", "grounding", "confidence", "seen"], default="score",
                   help="worst first: lowest CIDEr, grounding or confidence, or the object word least seen (visual "
                        "dependence: its log-prob drop when the photo is blurred away)")
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="only the first N photos")
    p.add_argument("--out", help="report folder (default triage/MODEL-SPLIT, which the app's Triage tab lists)")
    p.add_argument("--features", help="precomputed features for imported models (.tsv, .hdf5 or folder of .npz)")
    p.set_defaults(func=cmd_triage)


def _bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure latency per stage, render time, throughput, memory")
    p.add_argument("--models", nargs="+", help="default: every model in checkpoints/")
    p.add_argument("--images", nargs="+", help="photos or folders (default: assets/)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--startup", action="store_true", help="also time app start to first page (3 starts)")
    p.add_argument("--explain", action="store_true", help="also time per-word maps: occlusion of a whole caption, "
                                                          "Grad-CAM and relevancy per word, deletion of one word")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)


def _import_parser(sub) -> None:
    p = sub.add_parser("import", help="convert a community checkpoint (sgrvinod, AaronCCWong, ruotianluo, "
                                      "poojahira) into this viewer's safe format")
    p.add_argument("path", help="their checkpoint (.pth.tar / .pth); opened without running any code in it")
    p.add_argument("--word-map", help="WORDMAP_*.json (sgrvinod, poojahira) or word_dict.json (AaronCCWong)")
    p.add_argument("--infos", help="infos_*.pkl (ruotianluo)")
    p.add_argument("--encoder-weights", help="torchvision VGG-19 or ResNet-152 weights for an AaronCCWong model")
    p.add_argument("--out", required=True, help="NAME (saved in checkpoints/) or a path")
    p.set_defaults(func=cmd_import)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m viewer", description="Caption photos and inspect attention.")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--checkpoints", help="folder of named models (default: checkpoints/; installed: the "
                                              "shipped models, then ./checkpoints)")
    sub = parser.add_subparsers(dest="command", required=True)
    _caption_parser(sub)
    _models_parser(sub)
    _train_parser(sub)
    _average_parser(sub)
    _evaluate_parser(sub)
    _triage_parser(sub)
    _bench_parser(sub)
    _import_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .engine.checkpoints import CheckpointError
    from .engine.images import ImageError
    try:
        return args.func(args)
    except (CheckpointError, ImageError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
