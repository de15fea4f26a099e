"""The benchmark command measures what it says, and its unbatched reference decodes the same caption."""
import os

from viewer.analysis.speed import inprocess_table
from viewer.measure import bench
from viewer.engine.vision import model_inputs

from conftest import ASSETS


def test_unbatched_reference_finds_the_same_best_caption(captioner, photo):
    from viewer.engine.decoding import DecodeSettings, decode
    for model in ("sat-soft", "updown"):
        lm = captioner.model(model)
        feats = captioner.features([photo], with_regions=lm.attends_to == "regions")
        x, mask = model_inputs(feats, lm.attends_to)
        batched = decode(lm.model, x, mask, DecodeSettings(strategy="beam", beam_size=3), lm.vocab)[0][0].tokens
        assert bench.one_beam_at_a_time(lm, x, mask, beam=3, max_len=20) == batched


def test_bench_reports_every_stage(tiny_checkpoints):
    photos = [os.path.join(ASSETS, n) for n in ("coffee.jpg", "chelsea.jpg")]
    result = bench.run(["sat-hard", "updown"], photos, "cpu", repeats=1, checkpoint_dir=tiny_checkpoints,
                       answerers=["vqa-regions"])
    asked = result["models"].pop("vqa-regions")["ask_prepared"]   # one question per photo, timed
    assert 0 < asked["median_ms"] <= asked["p95_ms"]
    assert "ask -> answer" in inprocess_table({**result, "models": {"vqa-regions": {"ask_prepared": asked}}})
    for name, r in result["models"].items():
        stages = r["end_to_end"]
        assert set(stages) == {"preprocess", "encoder", "detector", "decode", "trace", "total"}
        assert stages["total"]["median_ms"] >= stages["encoder"]["median_ms"] > 0
        assert (stages["detector"]["median_ms"] > 0) == (name == "updown")   # grid models skip the detector
        assert r["batch_images_per_s"] > 0 and r["batching"]["speedup"] > 0
        guided = r["guided"]   # constrained by the detector's classes beside plain beam search
        assert guided["ratio"] > 0 and guided["plain"]["median_ms"] > 0 and 0 <= guided["photos_constrained"]
    assert result["peak_memory_mb"] > 0
    assert "| updown |" in inprocess_table(result)


def test_startup_times_the_app_to_its_first_page(tiny_checkpoints):
    result = bench.startup(tiny_checkpoints, repeats=1)
    assert result["starts"] == 1
    assert result["first_page_s"] > 0 and result["import_gradio_s"] > 0 and result["import_torch_s"] > 0
    assert "app start to first page" in inprocess_table({"machine": "m", "device": "cpu", "beam": 3, "images": [],
                                                     "peak_memory_mb": 1, "models": {}, "startup": result})
