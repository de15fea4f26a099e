"""Per-word explanation methods scored over a split: `evaluate --explain METHODS` (issue 27, section 4).

For each photo (the split's first `photos`, in split order) the first reference caption (or every
reference, `references="all"`) is forced through the model and its OBJECT words (those naming a
COCO class, `grounding.word_class`) are explained by each method (explain.py, attention always
included: it is the baseline). Per method, over those words:
- pixel faithfulness (pixel_faithfulness.py): deletion AUC MoRF (drop in nats, high is good), LeRF
  AUC (low is good), ROAD = (LeRF - MoRF) / 2 on the score (= (AUC_MoRF - AUC_LeRF) / 2 on drops,
  high is good), insertion AUC (log-prob rise over the blurred photo, high is good); beside them the
  random orders' AUCs (the floor);
- grounding of the method's maps (14x14 grid cells) against the detector's proxy boxes, with the
  centre / uniform / top-detection baselines (`grounding.ground_words`, `grounding_summary`);
- image-level bootstrap 95% intervals (`grounding.bootstrap_ci`), and the TARGET: the paired per-word
  difference of MoRF AUC between the best non-attention method and attention, with its interval;
- the sanity check (Adebayo et al. 2018) on the first `sanity` photos: cascading randomisation of the
  decoder, Spearman correlation of each method's maps before and after (all words of the caption).
"""
from __future__ import annotations

import time

import numpy as np

from ..engine.images import GRID, load_photo
from .explain import Pipeline, available_methods, explain, randomisation_check
from .grounding import PROXY_BOXES, bootstrap_ci, grid_units, ground_words, grounding_summary, word_class
from .pixel_faithfulness import INSERT_LEVELS, LEVELS, deletion, insertion

SANITY_SKIP = ("occlusion",)   # a full occlusion run per randomised layer: left out of the sanity check


def paired_difference(a, b, images, seed: int = 0) -> dict:
    """Mean of a - b (paired per word) with its image-level bootstrap 95% interval."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    return {"difference": round(float(d.mean()), 4) if len(d) else None, "ci": bootstrap_ci(d, images, seed=seed),
            "words": int(len(d))}


def _mean(values) -> float | None:
    return round(float(np.mean(values)), 4) if len(values) else None


def object_steps(words: list[str]) -> list[int]:
    """The steps where an object word starts (`words`: per step, a word's text at its first step, "" after)."""
    return [t for t, w in enumerate(words) if w not in ("", "<end>") and word_class(w) is not None]


def explain_photo(captioner, photo, model: str, caption: str, methods: tuple[str, ...], regions, image: int,
                  with_insertion: bool = True, sanity: bool = False, sanity_methods: tuple[str, ...] = ()) -> dict:
    """One photo and one forced caption: per object word, each method's AUCs; grounding items per
    method; with `sanity`, the cascading-randomisation rows."""
    start = time.perf_counter()
    pipe = Pipeline(captioner, photo, model, caption)
    steps = object_steps(pipe.words)
    out = {"words": [], "grounding": {m: [] for m in methods}, "seconds": {}, "sanity": None, "empty": {}}
    if not steps:
        return out
    found = explain(captioner, photo, model, caption, methods, pipe=pipe)
    out["seconds"] = dict(found.seconds)
    t0 = time.perf_counter()
    dele = deletion(pipe, found.maps, steps=steps)
    out["seconds"]["deletion"] = time.perf_counter() - t0
    ins = None
    if with_insertion:
        t0 = time.perf_counter()
        ins = insertion(pipe, found.maps, steps=steps)
        out["seconds"]["insertion"] = time.perf_counter() - t0
    units = grid_units(GRID * GRID)
    for m in methods:
        flat = found.maps[m].reshape(pipe.steps, -1).astype(np.float64)
        found_words = ground_words(pipe.words, flat, units, regions, image=image)
        out["grounding"][m] = [g for g in found_words if g.step in steps]
        out["empty"][m] = [bool(found.empty[m][t]) for t in steps]
    rand_morf, rand_ins = dele.auc(), (ins.auc() if ins is not None else None)
    for t in steps:
        row = {"image": image, "step": t, "word": pipe.words[t], "visual_dependence": float(dele.visual_dependence[t]),
               "random_morf": float(rand_morf[t]), "methods": {}}
        if ins is not None:
            row["random_insertion"] = float(rand_ins[t])
        for m in methods:
            row["methods"][m] = {"morf": float(dele.auc(m, "morf")[t]), "lerf": float(dele.auc(m, "lerf")[t]),
                                 "road": float(dele.road(m)[t])}
            if ins is not None:
                row["methods"][m]["insertion"] = float(ins.auc(m)[t])
        out["words"].append(row)
    if sanity and sanity_methods:
        t0 = time.perf_counter()
        out["sanity"] = randomisation_check(captioner, photo, model, caption, sanity_methods, explanation=found,
                                            pipe=pipe)
        out["seconds"]["sanity"] = time.perf_counter() - t0
    out["seconds"]["total"] = time.perf_counter() - start
    return out


def _sanity_block(runs: list, methods: tuple[str, ...]) -> dict | None:
    runs = [r for r in runs if r]
    if not runs:
        return None
    names = [name for name, _ in runs[0]]
    stages = [{"layers_randomised": name, **{m: _mean([r[i][1][m] for r in runs]) for m in methods}}
              for i, name in enumerate(names)]
    return {"photos": len(runs), "methods": list(methods), "skipped": [m for m in SANITY_SKIP],
            "words": "every word of the forced caption, <end> included",
            "measure": "mean Spearman correlation of each word's map before and after randomising the decoder's "
                       "layers cumulatively from the output down (low = the maps depend on the model)",
            "stages": stages, "all_randomised": {m: stages[-1][m] for m in methods}}


def summarise(rows: list[dict], grounding: dict[str, list], methods: tuple[str, ...], empty: dict[str, list],
              with_insertion: bool = True) -> dict:
    """The per-method block and the target from per-word rows (`explain_photo`'s 'words')."""
    images = [r["image"] for r in rows]
    ci = lambda vals: bootstrap_ci(vals, images)  # noqa: E731
    out = {"visual_dependence": _mean([r["visual_dependence"] for r in rows]),
           "random": {"auc_morf": _mean([r["random_morf"] for r in rows]),
                      "auc_morf_ci": ci([r["random_morf"] for r in rows])},
           "by_method": {}}
    if with_insertion:
        out["random"]["auc_insertion"] = _mean([r["random_insertion"] for r in rows])
        out["random"]["auc_insertion_ci"] = ci([r["random_insertion"] for r in rows])
    for m in methods:
        block = {}
        keys = (("auc_morf", "morf"), ("auc_lerf", "lerf"), ("road", "road"))
        keys += (("auc_insertion", "insertion"),) if with_insertion else ()
        for name, key in keys:
            vals = [r["methods"][m][key] for r in rows]
            block[name], block[name + "_ci"] = _mean(vals), ci(vals)
        block["morf_minus_random"] = paired_difference([r["methods"][m]["morf"] for r in rows],
                                                       [r["random_morf"] for r in rows], images)
        block["empty_maps"] = _mean([float(e) for e in empty.get(m, [])])
        block["grounding"] = grounding_summary(grounding[m])
        out["by_method"][m] = block
    others = [m for m in methods if m != "attention"]
    target = {"metric": "deletion AUC (MoRF, drop in nats, high is good): method - attention, paired per word, "
                        "image-level bootstrap 95% interval",
              "per_method": {m: paired_difference([r["methods"][m]["morf"] for r in rows],
                                                  [r["methods"]["attention"]["morf"] for r in rows], images)
                             for m in others}}
    if others and rows:
        best = max(others, key=lambda m: out["by_method"][m]["auc_morf"])
        target["best_non_attention"] = best
        target.update(target["per_method"][best])
        target["note"] = "the best method is chosen on these same words (highest mean MoRF AUC)"
    out["target"] = target
    return out


def explain_report(captioner, model: str, data, paths: list[str], methods: tuple[str, ...], regions=None,
                   photos: int | None = None, sanity: int = 5, references: str = "first",
                   with_insertion: bool = True, log=None) -> dict:
    """The "explain" block of `evaluate --explain`: see the module docstring.

    `paths`: the split's photos (the first `photos` are used); `regions`: their proxy boxes (the
    feature cache's detections, as the published grounding uses; detected here when None)."""
    if references not in ("first", "all"):
        raise ValueError("references: 'first' or 'all'")
    possible = available_methods(captioner, model)
    if "occlusion" not in possible:
        raise ValueError(f"{model} has no photo-space maps here (attention only): --explain needs them")
    asked = tuple(dict.fromkeys(("attention",) + tuple(methods)))
    used = tuple(m for m in asked if m in possible)
    skipped = [m for m in asked if m not in possible]
    sanity_methods = tuple(m for m in used if m not in SANITY_SKIP)
    chosen = list(range(len(paths)))[:photos] if photos else list(range(len(paths)))
    rows, grounding, empty, sanity_runs, seconds = [], {m: [] for m in used}, {m: [] for m in used}, [], []
    start = time.perf_counter()
    for n, i in enumerate(chosen):
        photo = load_photo(paths[i])
        reg = regions[i] if regions is not None else captioner.vision.detector.detect(photo.rgb)
        caps = data.captions[paths[i]][:1] if references == "first" else data.captions[paths[i]]
        for j, caption in enumerate(caps):
            found = explain_photo(captioner, photo, model, caption, used, reg, i, with_insertion,
                                  sanity=n < sanity and j == 0, sanity_methods=sanity_methods)
            rows += found["words"]
            for m in used:
                grounding[m] += found["grounding"][m]
                empty[m] += found["empty"].get(m, [])
            sanity_runs.append(found["sanity"])
            if found["seconds"]:
                seconds.append(found["seconds"])
        if log:
            log(f"explain {n + 1}/{len(chosen)} photos, {len(rows)} words, {time.perf_counter() - start:.0f} s")
    block = {"model": model, "methods": list(used), "methods_skipped": skipped,
             "photos": len(chosen), "photos_with_object_words": len({r["image"] for r in rows}),
             "photo_selection": "the split's first photos, in split order",
             "words": f"object words (grounding.word_class) of the {'first reference caption' if references == 'first' else 'reference captions'}"
                      " of each photo, forced through the model; <end> and other words left out",
             "references": references, "object_words": len(rows),
             "maps": "14x14 grid over the photo, each word's map clamped at 0 and summing to 1; attention of region "
                     "models projected onto the grid",
             "perturbation": "hidden cells replaced by the blurred photo (explain.BLUR_SIGMA), whole pipeline rerun",
             "deletion_levels": list(LEVELS), "insertion_levels": list(INSERT_LEVELS) if with_insertion else None,
             "units": "nats of the word's log-prob: MoRF/LeRF = mean drop (MoRF high is good, LeRF low is good); "
                      "road = (LeRF - MoRF) / 2 on the score (high is good); insertion = mean rise over the blurred "
                      "photo (high is good); random = random cell orders (the floor)",
             "boxes": PROXY_BOXES,
             "grounding_note": "grounding of each method's maps over the 14x14 cells on the same object words; "
                               "baselines (centre, uniform, top detection) as in the published grounding",
             "ci": "image-level bootstrap 95% intervals (grounding.bootstrap_ci)"}
    block.update(summarise(rows, grounding, used, empty, with_insertion))
    block["sanity"] = _sanity_block(sanity_runs, sanity_methods)
    keys = sorted({k for s in seconds for k in s})
    block["seconds_per_caption"] = {k: _mean([s[k] for s in seconds if k in s]) for k in keys}
    block["seconds"] = round(time.perf_counter() - start, 1)
    return block


def explain_table(block: dict) -> str:
    """A compact text table of an explain block, for evaluate without --json."""
    keys = ("auc_morf", "auc_lerf", "road", "auc_insertion")
    lines = [f"explain ({block['object_words']} object words on {block['photos_with_object_words']} photos; nats; "
             f"random MoRF {block['random']['auc_morf']}, insertion {block['random'].get('auc_insertion')})",
             "  method       " + "  ".join(f"{k:>14s}" for k in keys) + "   pointing  mass_in_box  off_centre"]
    for m, b in block["by_method"].items():
        g = b["grounding"]
        lines.append(f"  {m:12s} " + "  ".join(f"{str(b.get(k)):>14s}" for k in keys)
                     + f"   {g['pointing']}  {g['mass_in_box']}  {g['pointing_off_centre']}")
    t = block["target"]
    if "best_non_attention" in t:
        lines.append(f"  target: MoRF AUC {t['best_non_attention']} - attention = {t['difference']} (95% CI {t['ci']})")
    if block.get("sanity"):
        lines.append(f"  sanity (all layers randomised, Spearman): {block['sanity']['all_randomised']}")
    return "\n".join(lines)
