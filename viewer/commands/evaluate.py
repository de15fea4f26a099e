"""`evaluate`: score a model on a dataset split (captions, grounding, faithfulness, explanations),
or against your own boxed photos (`--boxes`, viewer/commands/boxes.py).

A split is mapped photo by photo into records (analysis/evaluate.py `split_records`), by any engine
(viewer/batch/), and reduced once (`reduce`), which is also what `merge` runs over shards."""
from __future__ import annotations

import functools
import json
import os

from . import options

NAME = "evaluate"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="score a model on a dataset split, or against your own boxes")
    p.add_argument("--model", required=True)
    p.add_argument("--data", help="the dataset: a Flickr8k-style folder, a Karpathy split JSON or a COCO captions "
                                  "JSON (required unless --boxes)")
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
    p.add_argument("--guide", choices=["detector"], help="captions must name the detector's top classes (constrained "
                   "beam search, analysis/guide.py); the report says so")
    p.add_argument("--guide-threshold", type=float, metavar="S", help="with --guide: the detection score a class "
                   "needs (default analysis/guide.py THRESHOLD; choose it on dev-select)")
    p.add_argument("--guide-most", type=int, metavar="N", help="with --guide: require at most N classes (default "
                   "analysis/guide.py MOST; 0: only rule out the words of classes it does not see)")
    p.add_argument("--questions", "--qa", metavar="FILE.json", help="question answering models (vqa-*): accuracy on the "
                   "split's questions of this file (written by `qa-data`), per type, beside the commonest answer")
    p.add_argument("--dependence", action="store_true", help="with --questions: each answer's visual dependence "
                   "(photo blurred away, photo removed) and the share guessed from the question")
    p.add_argument("--blind", metavar="MODEL", help="with --questions: the question-only model whose answers go beside "
                   "(how often it says the same)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--features", help="precomputed features for imported models (.tsv, .hdf5 or folder of .npz)")
    p.add_argument("--explain", metavar="METHODS", help="comma-separated explanation methods (occlusion, gradcam, "
                   "relevancy, superpixels, kernelshap, occlusion-fine; attention is always the baseline) scored on "
                   "the forced first reference's object words: deletion/LeRF/gap/insertion AUCs under each imputer, "
                   "grounding, sanity check (JSON key 'explain')")
    p.add_argument("--imputers", default="blur,road", metavar="NAMES",
                   help="with --explain: the imputers every map is scored under (default blur,road)")
    p.add_argument("--explain-photos", type=int, default=0, metavar="N",
                   help="with --explain: only the split's first N photos (0 = all; occlusion and deletion are slow)")
    p.add_argument("--explain-sanity", type=int, default=5, metavar="N",
                   help="with --explain: cascading-randomisation sanity check on the first N photos (default 5)")
    p.add_argument("--explain-references", choices=["first", "all"], default="first",
                   help="with --explain: the first reference caption of each photo, or all of them")
    options.add_batch_options(p, "write report.json, report.txt and captions.json there")
    p.set_defaults(func=run)


def fp16_weights(loaded) -> None:
    """Round the weights to fp16 in place: `--ship` scores exactly the weights that will ship."""
    import torch
    with torch.no_grad():
        for tensor in loaded.model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half())


def open_worker(opts: dict):
    """Once per worker: load the model, the dataset and the cache; returns items -> records."""
    from ..analysis.evaluate import pipeline_records, split_records
    from ..analysis.explain_eval import photo_record, rounded
    from ..data.cache import FeatureCache
    from ..data.datasets import load_dataset
    from ..engine.decoding import DecodeSettings
    from ..engine.pipeline import Captioner

    captioner = Captioner(opts["device"], checkpoint_dir=opts["checkpoints"], feature_files=opts["features"])
    loaded = captioner.model(opts["model_arg"])
    if opts["fp16"]:
        fp16_weights(loaded)
    data, cache = load_dataset(opts["data"]), FeatureCache(opts["cache"])
    settings = DecodeSettings(strategy="beam", beam_size=opts["beam"], max_len=opts["max_len"])
    explain = opts["explain"]

    def records(items: list[dict]) -> list[dict]:
        paths, indices = [it["id"] for it in items], [it["index"] for it in items]
        if loaded.imported:   # its own encoder or precomputed features: from the photos, through the pipeline
            recs = pipeline_records(captioner, opts["model_arg"], data, paths, indices, settings)
        else:
            recs = split_records(loaded, data, paths, indices, cache, settings, captioner.device, captioner.vision,
                                 opts["heads"], opts["faithfulness"], opts["guide"])
        for rec in recs:
            if explain and rec["index"] < explain["photos_asked"]:   # per-word explanations (issue 27)
                regions = None if loaded.imported else cache.regions(rec["id"])
                rec["explain"] = rounded(photo_record(
                    captioner, opts["model_arg"], data, rec["id"], rec["index"], tuple(explain["used"]), regions,
                    explain["references"], True, rec["index"] < explain["sanity_photos"],
                    tuple(explain["sanity_methods"]), tuple(explain["imputers"])))
        return recs
    return records


def job(args):
    """The evaluation as a batch job (and the model, loaded here to check it and name it)."""
    from ..analysis.evaluate import CHUNK, report_half_seen
    from ..analysis.explain_eval import explain_plan, fingerprint
    from ..batch import Job
    from ..data.datasets import load_dataset

    captioner = options.captioner(args)
    loaded = captioner.model(args.model)
    if loaded.imported and args.ship:
        raise ValueError(f"{loaded.name} is an imported model; --ship is for models trained here")
    if args.ship and args.guide:
        raise ValueError("--ship records the model's own scores: not with --guide")
    data = load_dataset(args.data)
    paths = data.split(args.split)
    explain = None
    methods = options.methods(args.explain)
    if methods:
        used, skipped, sanity_methods = explain_plan(captioner, args.model, methods)
        if skipped:
            raise ValueError(f"{loaded.name} has no {', '.join(skipped)} maps here (it has: "
                             f"{', '.join(used)}); photo-space maps need an encoder this viewer runs")
        imputers = options.imputers(args.imputers)
        asked = min(args.explain_photos, len(paths)) if args.explain_photos else len(paths)
        explain = {"used": list(used), "sanity_methods": list(sanity_methods), "imputers": list(imputers),
                   "references": args.explain_references, "photos_asked": asked,
                   "sanity_photos": args.explain_sanity,
                   "settings": fingerprint(captioner, args.model, args.split, used, imputers, args.explain_references,
                                           True, args.explain_sanity, data, paths)}
    guide = guide_settings(args, loaded)
    settings = {**options.model_identity(loaded), "imported": loaded.imported, "data": os.path.abspath(args.data),
                "data_digest": data.digest(), "split": args.split, "beam": args.beam, "max_len": args.max_len,
                "heads": args.heads, "faithfulness": args.faithfulness, "fp16": bool(args.ship),
                "features": args.features, "seen": report_half_seen(data, args.split), "explain": explain,
                "guide": guide}
    opts = {"device": args.device, "checkpoints": args.checkpoints, "features": args.features, "model_arg": args.model,
            "fp16": bool(args.ship), "data": args.data, "cache": args.cache, "beam": args.beam,
            "max_len": args.max_len, "heads": args.heads, "faithfulness": args.faithfulness, "explain": explain,
            "guide": guide}
    items = [{"index": i, "id": p} for i, p in enumerate(paths)]
    return Job(NAME, items, settings, functools.partial(open_worker, opts), CHUNK), loaded


def guide_settings(args, loaded) -> dict | None:
    """--guide as the records' fingerprint and the report name it."""
    if not args.guide:
        return None
    from ..analysis.guide import MOST, NO_REPEAT, RULE_OUT, THRESHOLD
    if loaded.imported:
        raise ValueError("--guide reads the detector's boxes in the feature cache: for the models trained here")
    if args.guide_most is not None and args.guide_most < 0:
        raise ValueError("--guide-most: how many classes to require, 0 or more")
    return {"source": args.guide, "threshold": THRESHOLD if args.guide_threshold is None else args.guide_threshold,
            "most": MOST if args.guide_most is None else args.guide_most, "rule_out": list(RULE_OUT),
            "no_repeat": NO_REPEAT}


def reduce(fingerprint: dict, records: list[dict]) -> dict:
    """The evaluation report from the sorted records: the same function for every engine and `merge`."""
    from ..analysis.evaluate import java_available, reduce_records
    from ..analysis.explain_reduce import explain_block
    metrics, captions = reduce_records(records, meteor=java_available())
    errors = [{"id": r["id"], "error": r["error"]} for r in records if "error" in r]
    result = {"model": fingerprint["model"], "split": fingerprint["split"], **fingerprint["seen"],
              "images": len(captions), "beam": fingerprint["beam"], **metrics, "failed_photos": errors,
              **({"guide": fingerprint["guide"]} if fingerprint.get("guide") else {})}
    explain = fingerprint.get("explain")
    if explain:
        recs = [r["explain"] for r in records if "explain" in r]
        result["explain"] = explain_block(recs, fingerprint["model"], tuple(explain["used"]), [],
                                          tuple(explain["imputers"]), explain["references"], explain["photos_asked"])
    result["captions"] = captions
    return result


def write(result: dict, out: str, fingerprint: dict | None = None) -> dict:
    """report.json, report.txt and captions.json in `out`; returns their paths."""
    from ..analysis.evaluate import write_captions
    paths = {k: os.path.join(out, f) for k, f in (("json", "report.json"), ("text", "report.txt"),
                                                   ("captions", "captions.json"))}
    report = {k: v for k, v in result.items() if k != "captions"}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    with open(paths["text"], "w", encoding="utf-8") as f:
        f.write(text(report) + "\n")
    write_captions(paths["captions"], result["captions"])
    return paths


def text(result: dict) -> str:
    """The report without --json: one line per figure, grounding blocks indented, the explain table last."""
    result = dict(result)
    explained = result.pop("explain", None)
    named = result.pop("hallucination", None)
    grounding = dict(result.pop("grounding"))
    lines = [f"{k:14s} {v}" for k, v in result.items()]
    if named:
        lines.append(f"hallucination  CHAIR_i {named['chair_i']} {named['chair_i_ci']}  CHAIR_s {named['chair_s']} "
                     f"{named['chair_s_ci']}  object recall {named['object_recall']} {named['object_recall_ci']}  "
                     f"({named['captions']} captions; {len(named['hallucinated'])} name an object no reference names)")
        why = named.get("why")
        if why:
            lines.append(f"  why          {why['words']} object words neither detected nor in a reference: "
                         + ", ".join(f"{why[c]} {c}" for c in ("naming failure", "nothing detected"))
                         + (f"; e.g. {why['examples'][0]}" if why["examples"] else ""))
    lines.append(f"grounding      ({grounding.pop('boxes')})")
    heads = grounding.pop("heads_forced", {})
    for which, block in grounding.items():
        lines.append(f"  {which:18s} " + ("  ".join(f"{k} {v}" for k, v in block.items()) if isinstance(block, dict)
                                          else str(block)))
    for which, block in heads.items():
        lines.append(f"  forced, {which:18s} " + "  ".join(f"{k} {v}" for k, v in block.items()))
    if explained is not None:
        from ..analysis.tables import explain_table
        lines.append(explain_table(explained))
    return "\n".join(lines)


def run(args) -> int:
    if args.boxes:
        from . import boxes
        return boxes.run(args)
    if not args.data:
        raise ValueError("evaluate needs --data (a dataset split) or --boxes (your own boxed photos)")
    if args.questions:
        from . import answers
        return answers.run(args)
    batch, loaded = job(args)
    records = options.run_batch(batch, args)
    if records is None:
        return 0
    result = reduce(batch.fingerprint, records)
    from ..analysis.evaluate import write_captions
    plain = os.path.basename(loaded.name.removeprefix("hf-hub:").removeprefix("hf:").rstrip(os.sep)) or "model"
    out = args.captions_out or (os.path.join(args.out, "captions.json") if args.out
                                else f"captions_{plain}_{args.split}.json")
    if args.out:
        write(result, args.out)
    write_captions(out, result.pop("captions"))
    result["captions_file"] = out
    if args.ship:
        from ..engine.checkpoints import named_path, ship
        fp16_weights(loaded)
        ship(loaded, named_path(args.ship, args.checkpoints), args.ship,
             {"dev_metrics": {k: result[k] for k in result if k not in ("model", "split", "images", "beam", "hallucination",
                                                                          "captions_file", "failed_photos", "explain",
                                                                          "looked_at_report_half", "report_half_photos")},
              "dev_settings": {"split": args.split, "beam": args.beam, "images": result["images"],
                               **batch.fingerprint["seen"]}})
    print(json.dumps(result) if args.json else text(result))
    return 0
