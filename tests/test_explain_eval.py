"""`evaluate --explain` and `bench --explain` (issue 27, sections 4-5) on the tiny models and dataset."""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import pytest

from conftest import ASSETS, ROOT


def _in_ci(ci, value=None, tol=1e-6):
    assert ci is not None and len(ci) == 2 and ci[0] <= ci[1] + tol
    if value is not None:
        assert ci[0] - tol <= value <= ci[1] + tol


def test_ci_of_a_known_paired_difference_excludes_zero():
    from viewer.analysis.explain_reduce import paired_difference
    rng = np.random.default_rng(0)
    images = np.repeat(np.arange(20), 3)
    b = rng.normal(0.5, 0.3, len(images))
    a = b + 0.2 + rng.normal(0, 0.05, len(images))           # a beats b by 0.2 on every word, nearly
    found = paired_difference(a, b, images)
    assert found["words"] == 60 and found["difference"] == pytest.approx(0.2, abs=0.03)
    assert found["ci"][0] > 0
    _in_ci(found["ci"], found["difference"])
    null = paired_difference(b + rng.normal(0, 0.05, len(images)), b, images)   # no real difference
    assert null["ci"][0] < 0 < null["ci"][1]


def test_insertion_curves_start_at_zero_and_end_at_visual_dependence(captioner, photo):
    from viewer.analysis.explain import Pipeline, explain
    from viewer.analysis.pixel_faithfulness import insertion
    pipe = Pipeline(captioner, photo, "sat-soft", "a cup of coffee on a table")
    found = explain(captioner, photo, "sat-soft", "a cup of coffee on a table", ("attention", "gradcam"), pipe=pipe)
    ins = insertion(pipe, found.maps, steps=[1])
    assert set(ins.curves) == {"attention", "gradcam"}
    dependence = ins.base - ins.removed
    for curve in (ins.random, ins.curves["gradcam"]):
        assert curve.shape == (pipe.steps, len(ins.levels))
        assert curve[1, 0] == 0 and curve[1, -1] == pytest.approx(dependence[1], abs=1e-5)
        assert np.isfinite(curve[1]).all()
    assert np.isnan(ins.curves["gradcam"][0]).all()          # only the asked words are measured
    # inside the curve: at level f the photo is blurred except the map's top round(f * 196) cells, and the
    # curve is how far that lifts the word (checked where the top set is unambiguous: no tie at its edge)
    values = np.sort(found.maps["gradcam"][1].ravel())[::-1]
    checked = 0
    for j, f in enumerate(ins.levels):
        n = round(f * 196)
        if not 0 < n < 196 or values[n - 1] == values[n]:
            continue
        keep = np.zeros(196, np.float32)
        keep[np.argsort(-found.maps["gradcam"][1].ravel(), kind="stable")[:n]] = 1.0
        lifted = pipe.logprobs(torch.from_numpy(keep.reshape(1, 14, 14)))[0, 1].item()
        assert ins.curves["gradcam"][1, j] == pytest.approx(lifted - ins.removed[1], abs=1e-4)
        checked += 1
    assert checked >= 1
    # a map that puts back nothing but the worst cells first rises no faster than its own best-first order
    assert np.isfinite(ins.auc("gradcam")[1]) and np.isfinite(ins.auc()[1])


def test_explain_report_block_has_every_key_and_resumes_from_its_records(captioner, tiny_data, tmp_path):
    """The report is the reduce of per-photo records: a run stopped after 1 photo and run again
    runs only the second, and gives the report an uninterrupted run gives; other settings are refused."""
    from viewer.analysis.explain_eval import explain_report
    from viewer.analysis.tables import explain_table
    from viewer.data.datasets import load_dataset
    data = load_dataset(tiny_data)
    paths = data.split("train")   # astronaut (woman), coffee (cup, table): the first two
    records = str(tmp_path / "records.jsonl")
    kw = dict(methods=("gradcam", "relevancy"), sanity=1, records=records, split="train")
    explain_report(captioner, "sat-soft", data, paths, photos=1, **kw)
    assert len(open(records).read().splitlines()) == 2                   # the fingerprint + 1 photo
    ran = []
    block = explain_report(captioner, "sat-soft", data, paths, photos=2, log=ran.append, **kw)
    assert len(ran) == 1 and ran[0].startswith("explain 2/2")            # only the missing photo ran
    whole = explain_report(captioner, "sat-soft", data, paths, photos=2, **{**kw, "records": None})
    drop = lambda b: {k: v for k, v in b.items() if k not in ("seconds", "seconds_per_caption")}  # noqa: E731
    assert json.dumps(drop(block), sort_keys=True) == json.dumps(drop(whole), sort_keys=True)
    with pytest.raises(ValueError, match="other settings"):
        explain_report(captioner, "sat-soft", data, paths, photos=2, **{**kw, "imputers": ("blur",)})

    assert block["methods"] == ["attention", "gradcam"] and block["methods_skipped"] == ["relevancy"]
    assert block["imputers"] == ["blur", "road"]
    assert block["photos"] == 2 and block["references"] == "first" and "first reference" in block["words"]
    assert block["object_words"] >= 3 and block["photos_with_object_words"] >= 2
    for imp, gap in (("blur", "blur_gap"), ("road", "road")):
        assert block["random"][imp]["auc_morf"] is not None and block["random"][imp]["auc_insertion"] is not None
        for m in ("attention", "gradcam"):
            b = block["by_method"][m][imp]
            for k in ("auc_morf", "auc_lerf", gap, "auc_insertion"):
                assert np.isfinite(b[k]), (m, imp, k)
                _in_ci(b[k + "_ci"], b[k])
            assert ("road" in b) == (imp == "road")                       # ROAD only under ROAD's imputer
    # the two imputers give different figures: ROAD's scoring is not the blur's under another name
    assert block["by_method"]["gradcam"]["road"]["auc_morf"] != block["by_method"]["gradcam"]["blur"]["auc_morf"]
    g = block["by_method"]["gradcam"]["grounding"]
    for k in ("pointing", "mass_in_box", "pointing_centre_baseline", "pointing_tolerant",
              "pointing_tolerant_centre_baseline", "pointing_to_centre", "pointing_off_centre"):
        assert k in g
    if g["detected"]:
        assert g["pointing_tolerant"] >= g["pointing"]                   # the tolerance only adds hits
    t = block["target"]
    assert set(t["per_method"]["gradcam"]) == {"blur", "road"} and "gradcam" in t["verdict"]
    s = block["sanity"]
    assert s["photos"] == 1 and s["methods"] == ["attention", "gradcam"] and s["stages"]
    assert s["stages"][0]["layers_randomised"] == "out" and s["stages"][-1]["layers_randomised"] == "feat_proj"
    assert all(v is None or -1 <= v <= 1 for v in s["all_randomised"].values())
    assert block["seconds_per_caption"]["gradcam"] > 0 and block["seconds_per_caption"]["curves_road"] > 0
    assert "gradcam - attention (MoRF)" in explain_table(block)
    assert block["sun_ablation"]["photos"] == 2 and "own caption" in block["sun_ablation"]["protocol"]
    sun = block["sun_ablation"]["by_method"]
    assert set(sun) == {"attention", "gradcam", "random"}
    words = [w for line in open(records).read().splitlines()[1:] for w in json.loads(line)["sun"]["words"]
             if w["named_unablated"]]                                     # the reduce is the mean of the records
    assert block["sun_ablation"]["object_words"] == len(words) >= 1
    for m, b in sun.items():
        assert b["gone"] == pytest.approx(np.mean([w["methods"][m]["gone"] for w in words]), abs=1e-4)
        assert b["drop"] == pytest.approx(np.mean([w["methods"][m]["drop"] for w in words]), abs=1e-4)


def test_records_made_without_sun_are_completed_and_give_what_a_whole_run_gives(captioner, tiny_data, tmp_path):
    """Records written while Sun's ablation was withdrawn get it added (and nothing else changes):
    the report then equals that of records made with it, one record per photo in the file."""
    from viewer.analysis.explain_eval import committed_report, complete_sun, explain_report
    from viewer.data.datasets import load_dataset
    data = load_dataset(tiny_data)
    paths = data.split("train")[:2]
    records = str(tmp_path / "sat-soft.jsonl")
    explain_report(captioner, "sat-soft", data, paths, methods=("gradcam",), sanity=0, records=records, split="train",
                   with_insertion=False)
    whole = committed_report(records, len(paths))
    lines = open(records).read().splitlines()
    stripped = [lines[0]] + [json.dumps({k: v for k, v in json.loads(line).items() if k != "sun"}) for line in lines[1:]]
    open(records, "w").write("\n".join(stripped) + "\n")
    assert committed_report(records, len(paths))["sun_ablation"] is None
    assert complete_sun(captioner, data, records) == 2 and complete_sun(captioner, data, records) == 0
    with pytest.raises(ValueError, match="no records"):
        complete_sun(captioner, data, str(tmp_path / "absent.jsonl"))
    assert len(open(records).read().splitlines()) == 3                    # the fingerprint + 2 photos, once each
    drop = lambda b: {k: v for k, v in b.items() if k != "seconds_per_caption"}  # noqa: E731
    assert json.dumps(drop(committed_report(records, len(paths))), sort_keys=True) == json.dumps(drop(whole), sort_keys=True)


def test_verdict_needs_every_imputer_to_agree():
    from viewer.analysis.explain_reduce import verdict
    better, unclear, worse = {"ci": [0.1, 0.3]}, {"ci": [-0.1, 0.2]}, {"ci": [-0.4, -0.1]}
    assert verdict({"blur": better, "road": better}).startswith("ranks what the word used better")
    assert verdict({"blur": worse, "road": worse}).startswith("ranks what the word used worse")
    assert verdict({"blur": better, "road": unclear}) == "the imputers disagree (blur: better, road: unclear)"
    assert verdict({"blur": unclear, "road": unclear}).startswith("not distinguishable")
    assert verdict({"blur": better, "road": better}).endswith("under both imputers (blur, road)")
    one = verdict({"blur": better})   # one imputer ran: never "every"
    assert one.endswith("under the blur imputer only (one imputer ran)") and "every" not in one


def test_evaluate_cli_writes_the_explain_block(tiny_checkpoints, tiny_data, cache_dir, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "viewer", "--checkpoints", tiny_checkpoints, "evaluate",
                           "--model", "sat-soft", "--data", tiny_data, "--split", "dev-select", "--cache", cache_dir,
                           "--json", "--captions-out", str(tmp_path / "c.json"), "--explain", "gradcam",
                           "--explain-photos", "1", "--explain-sanity", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "VIEWER_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    block = result["explain"]   # dev-select is chelsea.jpg: "a tabby cat looks to the side"
    assert block["photos"] == 1 and block["object_words"] == 2 and block["sanity"] is None   # "tabby" is a cat too (CHAIR's list)
    assert set(block["methods"]) == {"attention", "gradcam"} and "grounding" in result


def test_bench_explain_returns_numbers(captioner, photo):
    from viewer.engine.decoding import DecodeSettings
    from viewer.analysis.speed import inprocess_table
    from viewer.measure import bench
    found = bench.explain_timings(captioner, "transformer", [photo], DecodeSettings(strategy="greedy"))
    for k in ("occlusion_caption_s", "superpixels_caption_s", "kernelshap_caption_s", "occlusion-fine_caption_s",
              "gradcam_word_s", "relevancy_word_s", "deletion_word_s", "deletion_road_word_s"):
        assert found[k] > 0, k
    assert found["words"] >= 2 and found["targets"] == {"occlusion_caption_s": 3.0, "gradcam_word_s": 0.3,
                                                        "superpixels_caption_s": 4.0}
    assert set(found["meets"]) == set(found["targets"])
    table = inprocess_table({"machine": "m", "device": "cpu", "beam": 3, "images": [], "peak_memory_mb": 1,
                         "models": {"transformer": {"end_to_end": {k: {"median_ms": 1, "p95_ms": 1} for k in
                                                                    ("total", "preprocess", "encoder", "detector",
                                                                     "decode", "trace")},
                                                    "render_1024x768": {"median_ms": 1}, "batch_images_per_s": 1,
                                                    "batching": {"speedup": 1}, "explain": found}}})
    assert "occlusion, whole caption" in table and "| transformer |" in table.split("explanations")[1]


def test_region_model_explanations(captioner, photo):
    """updown: occlusion re-detects on the occluded photo, Grad-CAM flows through the RoI pooling,
    attention is the regions projected onto the grid; the explained run is the forced trace's."""
    from viewer.analysis.explain import Pipeline, attention_grid, explain
    trace = captioner.force([photo], "updown", ["a cup of coffee on a table"])[0]
    pipe = Pipeline(captioner, photo, "updown", trace.token_ids)
    found = explain(captioner, photo, "updown", trace.token_ids, ("attention", "occlusion", "gradcam"), pipe=pipe)
    assert np.allclose(found.logprobs, [s.logprob for s in trace.steps], atol=1e-4)
    assert np.allclose(found.maps["attention"], attention_grid(trace), atol=1e-5)
    for m in ("occlusion", "gradcam"):
        maps = found.maps[m]
        assert maps.shape == (len(trace.steps), 14, 14) and (maps >= 0).all()
        sums = maps.reshape(len(maps), -1).sum(1)
        assert np.allclose(sums[~found.empty[m]], 1, atol=1e-5) and (~found.empty[m]).any()
    unoccluded = pipe.logprobs(torch.ones(1, 14, 14))[0]       # nothing hidden: detection and pooling as cached
    assert torch.allclose(unoccluded, pipe.base(), atol=1e-3)
