"""Per-word explanation methods scored over a split: `evaluate --explain METHODS`.

For each photo (the split's first `photos`, in split order) the first reference caption (or every
reference, `references="all"`) is forced through the model and its OBJECT words (those naming a
COCO class, `grounding.word_class`) are explained by each method (explain/, attention always
included: it is the baseline). Per method, over those words, under EACH imputer (blur; road,
ROAD's noisy linear imputation, which no method optimises):
- pixel faithfulness (pixel_faithfulness.py): deletion AUC MoRF (drop in nats, high is good), LeRF
  AUC (low is good), the gap (AUC_MoRF - AUC_LeRF) / 2 (ROAD under road, the blur gap under blur;
  high is good), insertion AUC (log-prob rise over the photo hidden entirely, high is good); beside
  them the random orders' AUCs (the floor);
- grounding of the method's maps (14x14 grid cells) against the detector's proxy boxes: pointing
  strict and with TorchRay's 15 px tolerance, each beside the centre baseline, mass in box;
- image-level bootstrap 95% intervals (`grounding.bootstrap_ci`), the paired per-word difference of
  MoRF AUC between each method and attention under each imputer, and the verdict: a method ranks
  what the word used better than attention only where every imputer's interval excludes 0;
- the sanity check on the first `sanity` photos: the declared cascade, Spearman before/after, maps
  that turn constant counted apart.
A run is one record per photo (`photo_record`, JSON), appended to a file as it finishes and skipped
when the run starts again; the report is one reduce of the sorted records (explain_reduce.py).
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict

import numpy as np
import torch

from ..engine.images import GRID, load_photo
from .explain import IMPUTERS, REGISTRY, Pipeline, available_methods, explain, randomisation_check
from .explain_reduce import mean_or_none, explain_block
from .grounding import grid_units, ground_words, word_class
from ..engine.decoding import DecodeSettings
from .pixel_faithfulness import INSERT_LEVELS, LEVELS, SUN_PATCHES, SUN_TOP, deletion, insertion, sun_ablation

SUN_DECODE = DecodeSettings(strategy="beam", beam_size=3, max_len=20)   # the ablated photo's caption, as evaluate decodes



def object_steps(words: list[str]) -> list[int]:
    """The steps where an object word starts (`words`: per step, a word's text at its first step, "" after)."""
    return [t for t, w in enumerate(words) if w not in ("", "<end>") and word_class(w) is not None]


def explain_photo(captioner, photo, model: str, caption, methods: tuple[str, ...], regions, image: int,
                  with_insertion: bool = True, sanity: bool = False, sanity_methods: tuple[str, ...] = (),
                  imputers: tuple[str, ...] = IMPUTERS, question: str | None = None) -> dict:
    """One photo and one forced caption: per object word, each method's AUCs under each imputer;
    grounding items per method; with `sanity`, the cascading-randomisation stages. With `question`,
    `caption` is a question answering model's answer, scored as one word whatever it names."""
    start = time.perf_counter()
    pipe = Pipeline(captioner, photo, model, caption, question=question)
    steps = [0] if question is not None else object_steps(pipe.words)
    out = {"words": [], "grounding": {m: [] for m in methods}, "seconds": {}, "sanity": None, "empty": {}}
    if not steps:
        return out
    found = explain(captioner, photo, model, caption, methods, pipe=pipe)
    out["seconds"] = dict(found.seconds)
    curves = {}
    for imp in imputers:
        t0 = time.perf_counter()
        dele = deletion(pipe, found.maps, steps=steps, imputer=imp)
        ins = insertion(pipe, found.maps, steps=steps, imputer=imp) if with_insertion else None
        curves[imp] = (dele, ins)
        out["seconds"][f"curves_{imp}"] = time.perf_counter() - t0
    units = grid_units(GRID * GRID)
    for m in methods:
        flat = found.maps[m].reshape(pipe.steps, -1).astype(np.float64)
        found_words = ground_words(pipe.words, flat, units, regions, image=image, size=(photo.width, photo.height))
        out["grounding"][m] = [g for g in found_words if g.step in steps]
        out["empty"][m] = [bool(found.empty[m][t]) for t in steps]
    for t in steps:
        row = {"image": image, "step": t, "word": pipe.words[t], "visual_dependence": {}, "random_morf": {},
               "methods": {m: {} for m in methods}}
        for imp, (dele, ins) in curves.items():
            row["visual_dependence"][imp] = float(dele.visual_dependence[t])
            row["random_morf"][imp] = float(dele.auc()[t])
            if ins is not None:
                row.setdefault("random_insertion", {})[imp] = float(ins.auc()[t])
            for m in methods:
                cell = {"morf": float(dele.auc(m, "morf")[t]), "lerf": float(dele.auc(m, "lerf")[t]),
                        "gap": float(dele.gap(m)[t])}
                if ins is not None:
                    cell["insertion"] = float(ins.auc(m)[t])
                row["methods"][m][imp] = cell
        out["words"].append(row)
    if sanity and sanity_methods:
        t0 = time.perf_counter()
        out["sanity"] = [asdict(stage) for stage in randomisation_check(captioner, photo, model, caption, sanity_methods,
                                                                        explanation=found, pipe=pipe)]
        out["seconds"]["sanity"] = time.perf_counter() - t0
    out["seconds"]["total"] = time.perf_counter() - start
    return out


def sun_own_caption(captioner, photo, model: str, methods: tuple[str, ...]) -> dict:
    """Sun et al.'s ablation as published, on one photo: the model's own caption (beam 3), each of
    its object words explained by every method on that caption, the top patches zeroed in each
    map's order (and in a random order), the photo decoded anew. The unablated photo decoded through
    the same path is the baseline: a word it already lacks is not counted as removed by a map."""
    trace = captioner.caption([photo], model, SUN_DECODE)[0][0]
    pipe = Pipeline(captioner, photo, model, trace.token_ids)
    steps = object_steps(pipe.words)
    out = {"caption": trace.caption, "words": []}
    if not steps:
        return out
    found = explain(captioner, photo, model, trace.token_ids, methods, pipe=pipe)
    ablated = sun_ablation(pipe, found.maps, steps, SUN_DECODE)
    unablated = pipe.captions(torch.ones(1, GRID, GRID), "zero", SUN_DECODE)[0]
    named = {word_class(w.text) for w in pipe.lm.vocab.word_spans(unablated)}
    for t in steps:
        out["words"].append({"step": t, "word": pipe.words[t], "named_unablated": word_class(pipe.words[t]) in named,
                             "methods": ablated[t]})
    return out


def fingerprint(captioner, model: str, split: str | None, methods, imputers, references: str, with_insertion: bool,
                sanity: int, data, paths: list[str]) -> dict:
    """What a record depends on: the model's weights, the data (its files and the split's photos),
    every method's and imputer's constants, the random draws and the record format. A record file
    made with other settings is refused, never mixed."""
    from ..batch.records import FORMAT, digest, file_digest
    from .explain.imputers import IMPUTER_SETTINGS
    from .pixel_faithfulness import RANDOM_DRAWS
    lm = captioner.model(model)
    weights = file_digest(lm.path) if os.path.isfile(lm.path) else lm.name
    return {"model": lm.name, "checkpoint": weights, "format": FORMAT, "split": split,
            "data_digest": data.digest(), "photos": {"count": len(paths), "digest": digest(photo_ids(data, paths))},
            "methods": list(methods), "imputers": list(imputers), "references": references,
            "insertion": with_insertion, "sanity_photos": sanity, "levels": list(LEVELS),
            "insert_levels": list(INSERT_LEVELS), "random_draws": RANDOM_DRAWS,
            "sun_ablation": {"patches": SUN_PATCHES ** 2, "top": SUN_TOP, "decode": repr(SUN_DECODE)},
            "method_settings": {m: REGISTRY[m].settings() for m in methods},
            "imputer_settings": IMPUTER_SETTINGS}


def photo_ids(data, paths: list[str]) -> list[str]:
    """The photos' ids as records name them: paths relative to the dataset's folder."""
    return [os.path.relpath(p, data.root) for p in paths]


def rounded(value, digits: int = 5):
    """`value` with every float rounded to `digits` decimals: a record's figures are means over
    hundreds of words, and full float reprs would double the committed records' size."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def photo_record(captioner, model: str, data, path: str, index: int, methods, regions, references: str,
                 with_insertion: bool, sanity: bool, sanity_methods, imputers, asked: list | None = None) -> dict:
    """Every caption of one photo explained and scored: the record `summarise_records` reduces.
    `asked`: (question, answer token ids) pairs of a question answering model, whose answers are
    explained instead (Sun's ablation decodes captions: not for answers)."""
    photo = load_photo(path)
    reg = regions if regions is not None else captioner.vision.detector.detect(photo.rgb)
    caps = data.captions[path][:1] if references == "first" else data.captions[path]
    forced = [(c, None) for c in caps] if asked is None else [(answer, q) for q, answer in asked]
    rec = {"index": index, "id": photo_ids(data, [path])[0], "photo": os.path.basename(path), "words": [], "grounding": {m: [] for m in methods},
           "empty": {m: [] for m in methods}, "sanity": None, "seconds": []}
    for j, (caption, question) in enumerate(forced):
        found = explain_photo(captioner, photo, model, caption, methods, reg, index, with_insertion,
                              sanity=sanity and j == 0, sanity_methods=sanity_methods, imputers=imputers,
                              question=question)
        rec["words"] += found["words"]
        for m in methods:
            rec["grounding"][m] += [asdict(g) for g in found["grounding"][m]]
            rec["empty"][m] += found["empty"].get(m, [])
        rec["sanity"] = rec["sanity"] or found["sanity"]
        if found["seconds"]:
            rec["seconds"].append({k: round(v, 3) for k, v in found["seconds"].items()})
    if asked is None:
        start = time.perf_counter()
        rec["sun"] = sun_own_caption(captioner, photo, model, methods)
        rec["seconds"].append({"sun_ablation": round(time.perf_counter() - start, 3)})
    return rec


def explain_plan(captioner, model: str, methods: tuple[str, ...]) -> tuple[tuple, list, tuple]:
    """(methods used, methods asked but not available, methods the sanity check randomises):
    attention always first; refused when the model has no photo-space maps at all."""
    possible = available_methods(captioner, model)
    if "occlusion" not in possible:
        raise ValueError(f"{model} has no photo-space maps here (attention only): --explain needs them")
    asked = tuple(dict.fromkeys(("attention",) + tuple(methods)))
    used = tuple(m for m in asked if m in possible)
    return used, [m for m in asked if m not in possible], tuple(m for m in used if REGISTRY[m].cascade)


def explain_report(captioner, model: str, data, paths: list[str], methods: tuple[str, ...], regions=None,
                   photos: int | None = None, sanity: int = 5, references: str = "first",
                   with_insertion: bool = True, log=None, imputers: tuple[str, ...] = IMPUTERS,
                   records: str | None = None, split: str | None = None) -> dict:
    """The "explain" block over a split's first photos in this process: see the module docstring.
    One record per photo (`photo_record`), then one reduce of the sorted records (`explain_block`).

    `paths`: the split's photos (the first `photos` are used); `regions`: their proxy boxes (the
    feature cache's detections, as the published grounding uses; detected here when None);
    `records`: a JSON-lines file the records are appended to as they finish; the photos already in
    it are not run again (its fingerprint must match these settings)."""
    from ..batch.records import RecordFile
    if references not in ("first", "all"):
        raise ValueError("references: 'first' or 'all'")
    used, skipped, sanity_methods = explain_plan(captioner, model, methods)
    chosen = list(range(len(paths)))[:photos] if photos else list(range(len(paths)))
    store = RecordFile(records, fingerprint(captioner, model, split, used, imputers, references, with_insertion,
                                            sanity, data, paths), photo_ids(data, paths))
    ids = photo_ids(data, paths)
    for i in [i for i, r in store.done.items() if i >= len(paths) or r["id"] != ids[i]]:
        del store.done[i]   # a record is reused only for the photo it is about
    done = store.done
    start = time.perf_counter()
    for n, i in enumerate(chosen):
        if i in done:
            continue
        rec = photo_record(captioner, model, data, paths[i], i, used, None if regions is None else regions[i],
                           references, with_insertion, n < sanity, sanity_methods, imputers)
        store.add([rounded(rec)])   # reduced as written, so a resumed run reports the same
        if log:
            log(f"explain {len([c for c in chosen if c in done])}/{len(chosen)} photos, "
                f"{time.perf_counter() - start:.0f} s")
    block = explain_block([done[i] for i in chosen if i in done], model, used, skipped, imputers, references,
                          len(chosen), with_insertion)
    block["seconds"] = round(time.perf_counter() - start, 1)
    return block


FINE_CANDIDATES = {"2+3": ((2, 1), (3, 1)), "2": ((2, 1),), "3+5": ((3, 1), (5, 2))}   # (side, stride) in cells


def choose_fine_scales(captioner, models, data, split: str = "dev-select", photos: int = 8,
                       candidates: dict = FINE_CANDIDATES, log=None) -> dict:
    """occlusion-fine's windows, chosen on `split` (dev-select: the report half stays unseen). Per
    candidate, the mean deletion MoRF AUC of its maps over the object words of the split's first
    `photos` photos, under every imputer and for every model (the figure the verdict compares);
    pointing strict and within 15 px beside it. The largest MoRF, averaged over models and imputers,
    is chosen."""
    method = REGISTRY["occlusion-fine"]
    shipped = method.scales
    out = {"split": split, "photos": photos, "models": list(models), "candidates": {}}
    try:
        for name, scales in candidates.items():
            method.scales = scales
            per_model = {}
            for model in models:
                words, points = [], []
                for i, path in enumerate(data.split(split)[:photos]):
                    photo = load_photo(path)
                    found = explain_photo(captioner, photo, model, data.captions[path][0], ("occlusion-fine",),
                                          captioner.vision.detector.detect(photo.rgb), i, with_insertion=False)
                    words += [w["methods"]["occlusion-fine"] for w in found["words"]]
                    points += found["grounding"]["occlusion-fine"]
                per_model[model] = {"words": len(words),
                                    "morf": {imp: mean_or_none([w[imp]["morf"] for w in words]) for imp in IMPUTERS},
                                    "pointing": mean_or_none([g.hit for g in points if g.hit is not None]),
                                    "pointing_15px": mean_or_none([g.tolerant_hit for g in points if g.hit is not None])}
                if log:
                    log(f"fine scales {name}: {model} {per_model[model]}")
            score = mean_or_none([v for r in per_model.values() for v in r["morf"].values() if v is not None])
            out["candidates"][name] = {"scales": [list(s) for s in scales], "morf": score, "per_model": per_model}
    finally:
        method.scales = shipped
    out["chosen"] = max(out["candidates"], key=lambda k: out["candidates"][k]["morf"] or float("-inf"))
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m viewer.analysis.explain_eval`: the committed which-map-to-trust reports. Every model's
    records grow round-robin, `--step` photos at a time, in the split's order, so a stopped run leaves
    every model with a report of the same photos (each report says how many); run it again to go on."""
    import argparse
    from ..engine.pipeline import Captioner
    from ..data.datasets import load_dataset
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="dev-report")
    p.add_argument("--models", default="sat-soft,sat-hard,transformer,updown")
    p.add_argument("--methods", default="occlusion,superpixels,gradcam,relevancy,kernelshap,occlusion-fine")
    p.add_argument("--out", default="reports/explain", help="records (MODEL.jsonl) and reports (MODEL.json) here")
    p.add_argument("--photos", type=int, default=0, help="stop at the split's first N photos (0 = all)")
    p.add_argument("--step", type=int, default=10, help="photos per model per round")
    p.add_argument("--sanity", type=int, default=20, help="the randomisation check on the first N photos")
    p.add_argument("--device", default=None)
    p.add_argument("--choose-fine", metavar="FILE", help="instead: choose occlusion-fine's windows on dev-select "
                   "(the first --photos photos, 8 by default) and write the comparison to FILE")
    p.add_argument("--complete-sun", action="store_true", help="instead: add Sun et al.'s ablation to the records "
                   "that lack it (of the first --photos photos, if given), then write the reports again")
    args = p.parse_args(argv)
    captioner, data = Captioner(args.device), load_dataset(args.data)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.choose_fine:
        found = choose_fine_scales(captioner, models, data, photos=args.photos or 8, log=lambda m: print(m, flush=True))
        with open(args.choose_fine, "w") as f:
            json.dump(found, f, indent=1)
        print("chosen:", found["chosen"], FINE_CANDIDATES[found["chosen"]])
        return 0
    os.makedirs(args.out, exist_ok=True)
    paths = data.split(args.split)
    if args.complete_sun:
        failed = 0
        for model in models:
            records = os.path.join(args.out, f"{model}.jsonl")
            try:
                complete_sun(captioner, data, records, args.photos or None, log=lambda m: print(m, flush=True))
            except ValueError as err:   # a missing or foreign records file: one line, the other models go on
                print(f"error: {err}", file=sys.stderr)
                failed += 1
                continue
            with open(os.path.join(args.out, f"{model}.json"), "w") as f:
                json.dump(committed_report(records, len(paths)), f, indent=1)
        return 2 if failed else 0
    total = min(args.photos or len(paths), len(paths))
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    for upto in range(min(args.step, total), total + args.step, args.step):
        for model in models:
            asked = tuple(m for m in methods if m in available_methods(captioner, model))
            records = os.path.join(args.out, f"{model}.jsonl")
            explain_report(captioner, model, data, paths, asked, photos=min(upto, total), sanity=args.sanity,
                           records=records, split=args.split, log=lambda m, model=model: print(model, m, flush=True))
            with open(os.path.join(args.out, f"{model}.json"), "w") as f:
                json.dump(committed_report(records, len(paths)), f, indent=1)
    return 0


def complete_sun(captioner, data, records: str, upto: int | None = None, log=None) -> int:
    """Sun et al.'s ablation for the records of `records` that lack it (made while the published
    protocol was withdrawn; those of the split's first `upto` photos), with the records' own methods:
    each completed record is appended (a later record of an index replaces the earlier), then the
    file is rewritten, one record a photo. Returns how many were completed."""
    from ..batch.records import read_dir
    fingerprint, ids, recs = read_dir(os.path.dirname(records) or ".", None, os.path.basename(records))
    if fingerprint is None:
        raise ValueError(f"{records}: no records to add Sun's ablation to (explain_eval writes them)")
    missing = [i for i in sorted(recs) if "sun" not in recs[i] and "error" not in recs[i] and (upto is None or i < upto)]
    for n, i in enumerate(missing, 1):
        rec, start = recs[i], time.perf_counter()
        photo = load_photo(os.path.join(data.root, rec["id"]))
        rec["sun"] = sun_own_caption(captioner, photo, fingerprint["model"], tuple(fingerprint["methods"]))
        rec["seconds"].append({"sun_ablation": round(time.perf_counter() - start, 3)})
        with open(records, "a", encoding="utf-8") as f:
            f.write(json.dumps(rounded(rec)) + "\n")
        if log:
            log(f"{fingerprint['model']}: Sun's ablation {n}/{len(missing)} photos")
    _, _, recs = read_dir(os.path.dirname(records) or ".", fingerprint, os.path.basename(records))
    with open(records + ".part", "w", encoding="utf-8") as f:
        f.write(json.dumps({"fingerprint": fingerprint, "items": ids}) + "\n")
        f.write("".join(json.dumps(recs[i]) + "\n" for i in sorted(recs)))
    os.replace(records + ".part", records)
    return len(missing)


def committed_report(records: str, split_photos: int) -> dict:
    """A committed report (reports/explain/MODEL.json): the reduce of its records file alone, so a
    test can check that every figure in it comes from the records beside it."""
    from ..batch.records import read_dir
    fingerprint, _, recs = read_dir(os.path.dirname(records) or ".", None, os.path.basename(records))
    block = explain_block([recs[i] for i in sorted(recs)], fingerprint["model"], tuple(fingerprint["methods"]), [],
                          tuple(fingerprint["imputers"]), fingerprint["references"], len(recs), fingerprint["insertion"])
    block.update(partial=len(recs) < split_photos, split=fingerprint["split"], split_photos=split_photos)
    return block


if __name__ == "__main__":
    raise SystemExit(main())
