"""The which-map-to-trust report from per-photo records (explain_eval.py writes them): per method
and imputer, the deletion, insertion and gap AUCs with image-level 95% intervals, the paired
difference from attention and its verdict (better or worse than attention only where every imputer
that ran agrees, and the verdict names them), grounding, the sanity check, and Sun et al.'s
ablation. The same reduce whatever ran the records."""
from __future__ import annotations

import numpy as np

from .explain import IMPUTERS, REGISTRY
from .grounding import PROXY_BOXES, bootstrap_ci, grounding_summary
from .pixel_faithfulness import INSERT_LEVELS, LEVELS, SUN_PATCHES, SUN_TOP


def paired_difference(a, b, images, seed: int = 0) -> dict:
    """Mean of a - b (paired per word) with its image-level bootstrap 95% interval."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    return {"difference": round(float(d.mean()), 4) if len(d) else None, "ci": bootstrap_ci(d, images, seed=seed),
            "words": int(len(d))}


def mean_or_none(values) -> float | None:
    return round(float(np.mean(values)), 4) if len(values) else None


def sun_block(recs: list[dict], methods: tuple[str, ...]) -> dict | None:
    """Sun et al.'s figures from the photos' records that hold the ablation: per method and for the
    random order, the share of the model's own object words that disappear (of those the unablated
    decode names) and the word's log-prob drop, with image-level 95% intervals."""
    rows = [(r["index"], w) for r in recs if r.get("sun") for w in r["sun"]["words"] if w["named_unablated"]]
    photos = sum(1 for r in recs if r.get("sun") is not None)
    if not photos:
        return None
    images = [i for i, _ in rows]
    ci = lambda vals: bootstrap_ci(vals, images)  # noqa: E731
    by_method = {}
    for m in (*methods, "random"):
        gone = [float(w["methods"][m]["gone"]) for _, w in rows]
        drop = [w["methods"][m]["drop"] for _, w in rows]
        by_method[m] = {"gone": mean_or_none(gone), "gone_ci": ci(gone), "drop": mean_or_none(drop), "drop_ci": ci(drop)}
    return {"protocol": f"Sun et al. 2020 as published: the model's own caption (beam 3); per object word, the top "
                        f"{SUN_TOP} of the {SUN_PATCHES ** 2} 8x8 patches of the input zeroed (the encoder's "
                        "normalised 0) in each map's order (the map of that word on that caption), or a random "
                        "order; the photo decoded anew (beam 3): the share of object words it no longer names, and "
                        "the word's forced log-prob drop (nats, summed over its tokens)",
            "photos": photos, "object_words": len(rows),
            "not_named_unablated": sum(1 for r in recs if r.get("sun") for w in r["sun"]["words"]
                                       if not w["named_unablated"]),
            "by_method": by_method}


def gap_name(imputer: str) -> str:
    """ROAD is the gap under ROAD's imputer only; under the blur it is the blur gap."""
    return "road" if imputer == "road" else f"{imputer}_gap"


def _sanity_block(runs: list, methods: tuple[str, ...]) -> dict | None:
    runs = [r for r in runs if r]
    if not runs:
        return None
    stages = []
    for i, first in enumerate(runs[0]):
        row = {"layers_randomised": first["layers"]}
        for m in methods:
            row[m] = mean_or_none([r[i]["spearman"][m] for r in runs if r[i]["spearman"][m] is not None])
            row[f"{m}_constant_maps"] = int(sum(r[i]["constant"][m] for r in runs))
        stages.append(row)
    return {"photos": len(runs), "methods": list(methods), "skipped": "methods that rerun the photos (occlusion, superpixels, KernelSHAP): a full run per stage",
            "words": "every word of the forced caption, <end> included",
            "maps": int(sum(r[0]["words"] for r in runs)),
            "order": "the model's declared cascade (CaptionModel.cascade), from the output down; tied weights named "
                     "with the stage nearest the output",
            "measure": "mean Spearman correlation of each word's map before and after randomising the decoder's "
                       "layers cumulatively from the output down (low = the maps depend on the model), over the maps "
                       "that are not constant; maps that turn constant (no evidence left) are counted apart",
            "stages": stages, "all_randomised": {m: stages[-1][m] for m in methods},
            "all_randomised_constant_maps": {m: stages[-1][f"{m}_constant_maps"] for m in methods}}


def verdict(per_imputer: dict[str, dict]) -> str:
    """One method against attention from its paired MoRF difference under each imputer: better (or
    worse) only where every imputer's interval excludes 0 on the same side; otherwise say so. The
    verdict names the imputers that ran: with one, it is that imputer's alone, never "every"."""
    signs = {}
    for imp, d in per_imputer.items():
        lo, hi = (d["ci"] or [None, None])
        signs[imp] = "better" if lo is not None and lo > 0 else "worse" if hi is not None and hi < 0 else "unclear"
    values = set(signs.values())
    if len(values) > 1:
        return "the imputers disagree (" + ", ".join(f"{imp}: {v}" for imp, v in signs.items()) + ")"
    under = f"under both imputers ({', '.join(signs)})" if len(signs) == 2 else \
        f"under all {len(signs)} imputers ({', '.join(signs)})" if len(signs) > 2 else \
        f"under the {next(iter(signs))} imputer only (one imputer ran)"
    return {"better": f"ranks what the word used better than attention {under}",
            "worse": f"ranks what the word used worse than attention {under}",
            "unclear": f"not distinguishable from attention {under}"}[values.pop()]


def summarise(rows: list[dict], grounding: dict[str, list], methods: tuple[str, ...], empty: dict[str, list],
              with_insertion: bool = True, imputers: tuple[str, ...] = IMPUTERS) -> dict:
    """The per-method blocks (each imputer apart), the target and the verdict from per-word rows."""
    images = [r["image"] for r in rows]
    ci = lambda vals: bootstrap_ci(vals, images)  # noqa: E731
    out = {"visual_dependence": {imp: mean_or_none([r["visual_dependence"][imp] for r in rows]) for imp in imputers},
           "random": {}, "by_method": {}}
    for imp in imputers:
        rand = [r["random_morf"][imp] for r in rows]
        out["random"][imp] = {"auc_morf": mean_or_none(rand), "auc_morf_ci": ci(rand)}
        if with_insertion:
            vals = [r["random_insertion"][imp] for r in rows]
            out["random"][imp].update(auc_insertion=mean_or_none(vals), auc_insertion_ci=ci(vals))
    for m in methods:
        block = {}
        for imp in imputers:
            sub = {}
            keys = (("auc_morf", "morf"), ("auc_lerf", "lerf"), (gap_name(imp), "gap"))
            keys += (("auc_insertion", "insertion"),) if with_insertion else ()
            for name, key in keys:
                vals = [r["methods"][m][imp][key] for r in rows]
                sub[name], sub[name + "_ci"] = mean_or_none(vals), ci(vals)
            sub["morf_minus_random"] = paired_difference([r["methods"][m][imp]["morf"] for r in rows],
                                                         [r["random_morf"][imp] for r in rows], images)
            block[imp] = sub
        block["empty_maps"] = mean_or_none([float(e) for e in empty.get(m, [])])
        block["grounding"] = grounding_summary(grounding[m])
        out["by_method"][m] = block
    others = [m for m in methods if m != "attention"]
    target = {"metric": "deletion AUC (MoRF, drop in nats, high is good): method - attention, paired per word, "
                        "image-level bootstrap 95% interval, under each imputer",
              "per_method": {m: {imp: paired_difference([r["methods"][m][imp]["morf"] for r in rows],
                                                        [r["methods"]["attention"][imp]["morf"] for r in rows], images)
                                 for imp in imputers} for m in others}}
    target["verdict"] = {m: verdict(target["per_method"][m]) for m in others} if rows else {}
    out["target"] = target
    return out


def summarise_records(recs: list[dict], methods: tuple[str, ...], imputers: tuple[str, ...], with_insertion: bool,
                      sanity_methods: tuple[str, ...]) -> dict:
    """The report from per-photo records (sorted by photo index): the same whatever ran them."""
    from .grounding import Grounding
    recs = sorted(recs, key=lambda r: r["index"])
    rows = [w for r in recs for w in r["words"]]
    grounding = {m: [Grounding(**g) for r in recs for g in r["grounding"][m]] for m in methods}
    empty = {m: [e for r in recs for e in r["empty"][m]] for m in methods}
    seconds = [s for r in recs for s in r["seconds"]]
    block = {"methods": list(methods), "imputers": list(imputers),
             "photos": len(recs), "photos_with_object_words": len({r["image"] for r in rows}),
             "photo_selection": "the split's first photos, in split order",
             "object_words": len(rows),
             "maps": "14x14 grid over the photo, each word's map clamped at 0 and summing to 1; attention of region "
                     "models projected onto the grid; superpixel maps pooled onto it",
             "perturbation": "hidden cells imputed, whole pipeline rerun: blur = the photo blurred (sigma 12 px on "
                             "224, as occlusion and superpixel ablation build their maps); road = ROAD's noisy linear "
                             "imputation (pytorch-grad-cam's NoisyLinearImputer, followed exactly), which no method "
                             "optimises",
             "deletion_levels": list(LEVELS), "insertion_levels": list(INSERT_LEVELS) if with_insertion else None,
             "units": "nats of the word's log-prob (summed over its tokens): MoRF/LeRF = mean drop (MoRF high is "
                      "good, LeRF low is good); road (cell-level ROAD: ranked and hidden by the 14x14 grid's cells, "
                      "not pixels) and blur_gap (under blur) = (LeRF - MoRF) / 2 on the score (high is good); "
                      "insertion = mean rise over the photo hidden entirely (high is good); random = random cell "
                      "orders (the floor)",
             "boxes": PROXY_BOXES,
             "grounding_note": "grounding of each method's maps over the 14x14 cells on the same object words; "
                               "baselines (centre, uniform, top detection) as in the published grounding; pointing "
                               "strict and with TorchRay's 15 px tolerance, each with the centre baseline",
             "ci": "image-level bootstrap 95% intervals (grounding.bootstrap_ci)"}
    block.update(summarise(rows, grounding, methods, empty, with_insertion, imputers))
    block["sanity"] = _sanity_block([r["sanity"] for r in recs], sanity_methods)
    block["sun_ablation"] = sun_block(recs, methods)
    keys = sorted({k for s in seconds for k in s})
    block["seconds_per_caption"] = {k: mean_or_none([s[k] for s in seconds if k in s]) for k in keys}
    return block


def explain_block(recs: list[dict], model: str, used: tuple, skipped: list, imputers: tuple, references: str,
                  photos_asked: int, with_insertion: bool = True) -> dict:
    """The "explain" block of an evaluation from its photos' records (`photo_record`)."""
    block = summarise_records(recs, used, imputers, with_insertion, tuple(m for m in used if REGISTRY[m].cascade))
    words = ("the model's answer to each question of the photo (one word, whatever it names), forced with its "
             "question" if references == "answers" else
             f"object words (grounding.word_class) of the "
             f"{'first reference caption' if references == 'first' else 'reference captions'} of each photo, "
             "forced through the model; <end> and other words left out")
    block.update(model=model, methods_skipped=skipped, photos_asked=photos_asked, references=references, words=words)
    return block
