"""Training end to end on a tiny dataset, the metrics, dataset readers, vocabulary and feature cache."""
import json
import os

import numpy as np
import pytest

from viewer.training.cache import FeatureCache
from viewer.training.datasets import load_dataset, read_coco, read_karpathy
from viewer.engine.vocab import Vocabulary, tokenize
from viewer.analysis.evaluate import score_captions


def test_training_runs_end_to_end_loss_falls_and_resumes(tiny_data, cache_dir, tmp_path):
    from viewer.engine import checkpoints
    from viewer.training.train import TrainConfig, train

    out = str(tmp_path / "run")
    cfg = TrainConfig(model="sat-soft", data=tiny_data, out=out, epochs=4, batch_images=3, lr=3e-3, min_freq=1,
                      patience=10, cache=cache_dir, hparams={"hidden_dim": 64, "embed_dim": 32, "att_dim": 32,
                                                            "proj_dim": 64, "dropout": 0.0})
    train(cfg, log=lambda *a: None)
    log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]
    assert [r["epoch"] for r in log] == [1, 2, 3, 4]
    assert log[-1]["xe"] < log[0]["xe"] - 0.5
    assert {"BLEU-4", "CIDEr", "ROUGE-L"} <= set(log[-1]["dev"]) and log[-1]["captions_per_s"] > 0
    best = checkpoints.load(os.path.join(out, "best.safetensors"))
    assert best.meta["dev_metrics"]["CIDEr"] == max(r["dev"]["CIDEr"] for r in log)
    cfg.epochs, cfg.resume = 5, True
    train(cfg, log=lambda *a: None)
    log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]
    assert [r["epoch"] for r in log] == [1, 2, 3, 4, 5]


def test_early_stopping_can_score_the_select_half_only():
    from viewer.training.datasets import CaptionSet, half_of
    from viewer.training.train import TrainConfig, scored_dev_photos

    dev = [f"/d/images/{i}.jpg" for i in range(40)]
    data = CaptionSet("/d", splits={"train": [], "dev": dev})
    cfg = TrainConfig(model="sat-soft", data="/d", out="/tmp/unused", dev_images=5)
    assert scored_dev_photos(data, cfg) == dev[:5]
    cfg.dev_split = "dev-select"
    chosen = scored_dev_photos(data, cfg)
    assert len(chosen) == 5 and {half_of(p) for p in chosen} == {"select"}
    assert chosen == [p for p in dev if half_of(p) == "select"][:5]
    cfg.dev_images = 0
    assert {half_of(p) for p in scored_dev_photos(data, cfg)} == {"select"}


def test_metrics_match_pycocoevalcap_called_directly():
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    refs = {"a": ["A dog runs on the grass.", "a brown dog running in a field"],
            "b": ["Two children play on a beach.", "kids playing in the sand by the sea"],
            "c": ["A man rides a bike down the street.", "a cyclist on a city road"]}
    preds = {"a": "a dog runs on the grass", "b": "two kids play on the beach", "c": "a man on a bike"}
    ours = score_captions(preds, refs)
    tok = PTBTokenizer()
    gts = tok.tokenize({k: [{"caption": c} for c in v] for k, v in refs.items()})
    res = tok.tokenize({k: [{"caption": v}] for k, v in preds.items()})
    bleu, _ = Bleu(4).compute_score(gts, res)
    cider, _ = Cider().compute_score(gts, res)
    assert ours["BLEU-4"] == round(bleu[3] * 100, 2) and ours["BLEU-1"] == round(bleu[0] * 100, 2)
    assert ours["CIDEr"] == round(cider * 100, 2)
    assert 0 < ours["METEOR"] < 100 and 0 < ours["ROUGE-L"] < 100


def test_a_caption_equal_to_its_only_reference_scores_full_bleu():
    scores = score_captions({"x": "a dog runs across the green grass"}, {"x": ["A dog runs across the green grass."]},
                            meteor=False)
    assert scores["BLEU-4"] == 100.0 and scores["BLEU-1"] == 100.0 and scores["ROUGE-L"] == 100.0


def test_tokenizer_and_vocabulary():
    assert tokenize("A dog's ball, 2 BALLS!") == ["a", "dog", "s", "ball", "2", "balls"]
    vocab = Vocabulary.build(["a dog", "a cat", "a dog runs"], min_freq=2)
    assert vocab.words == ["<pad>", "<start>", "<end>", "<unk>", "a", "dog"]
    assert vocab.encode("A cat dog") == [4, 3, 5]
    with pytest.raises(ValueError):
        Vocabulary(["a", "b"])


def test_flickr8k_reader(tiny_data):
    data = load_dataset(tiny_data)
    assert sorted(data.splits) == ["dev", "train"] and len(data.split("train")) == 6
    assert all(len(data.captions[p]) == 3 for p in data.split("train"))
    with pytest.raises(ValueError, match="available: dev, train"):
        data.split("test")


def test_karpathy_and_coco_readers(tmp_path):
    karpathy = {"images": [
        {"filepath": "val2014", "filename": "x.jpg", "split": "val", "sentences": [{"raw": "A cat.", "tokens": ["a", "cat"]}]},
        {"filepath": "train2014", "filename": "y.jpg", "split": "restval", "sentences": [{"tokens": ["a", "dog"]}]}]}
    data = read_karpathy(karpathy, str(tmp_path))
    assert data.split("dev") == [str(tmp_path / "val2014" / "x.jpg")]
    assert data.captions[str(tmp_path / "train2014" / "y.jpg")] == ["a dog"]
    coco = {"images": [{"id": 1, "file_name": "1.jpg"}, {"id": 2, "file_name": "2.jpg"}],
            "annotations": [{"image_id": 1, "caption": "one"}, {"image_id": 1, "caption": "uno"},
                            {"image_id": 2, "caption": "two"}]}
    (tmp_path / "captions_val2014.json").write_text(json.dumps(coco))
    data = load_dataset(str(tmp_path / "captions_val2014.json"))
    assert data.split("dev") == [str(tmp_path / "1.jpg"), str(tmp_path / "2.jpg")]
    assert read_coco(coco, "r").captions["r/1.jpg"] == ["one", "uno"]


def test_feature_cache_continues_after_interruption(tiny_data, vision, tmp_path):
    data = load_dataset(tiny_data)
    paths = data.split("train")
    cache = FeatureCache(str(tmp_path))
    cache.build(paths[:2], vision, log=lambda *a: None)
    assert cache.missing(paths) == paths[2:]
    open(cache.path(paths[2]) + ".tmp.npz", "wb").write(b"half-written")   # an interrupted write
    messages = []
    cache.build(paths, vision, log=messages.append)
    assert "2 cached, 4 to compute" in messages[0]
    assert cache.missing(paths) == []
    assert cache.load(paths[3]).grid.shape == (196, 1280)
    with open(os.path.join(cache.dir, "spec.json")) as f:
        assert "encoder" in json.load(f)


def test_evaluate_command_scores_a_split_and_ships_the_model(tiny_checkpoints, tiny_data, cache_dir, tmp_path):
    import shutil
    import subprocess
    import sys
    from viewer.engine import checkpoints
    from conftest import ROOT

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints, folder)
    captions = tmp_path / "captions.json"
    proc = subprocess.run([sys.executable, "-m", "viewer", "--checkpoints", str(folder), "evaluate", "--model",
                           "sat-soft", "--data", tiny_data, "--split", "dev", "--cache", cache_dir, "--json",
                           "--captions-out", str(captions), "--ship", "shipped"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["images"] == 2 and {"BLEU-4", "METEOR", "ROUGE-L", "CIDEr"} <= set(result)
    written = json.load(open(captions))
    assert sorted(os.path.basename(c["image"]) for c in written) == ["chelsea.jpg", "rocket.jpg"]
    meta = checkpoints.read_meta(str(folder / "shipped.safetensors"))
    assert meta["name"] == "shipped" and meta["dev_metrics"]["BLEU-4"] == result["BLEU-4"]
    assert meta["dev_settings"]["beam"] == 3


@pytest.mark.parametrize("model", ["sat-soft", "updown"])
def test_evaluation_reports_grounding_on_own_and_forced_reference_words(tiny_checkpoints, tiny_data, cache_dir, model):
    """Grid and region models (regions padded to a batch's longest list) get the same grounding block."""
    from viewer.engine import checkpoints
    from viewer.training.datasets import load_dataset
    from viewer.engine.decoding import DecodeSettings
    from viewer.analysis.evaluate import evaluate_split

    loaded = checkpoints.load(os.path.join(tiny_checkpoints, f"{model}.safetensors"))
    data = load_dataset(tiny_data)
    metrics, _ = evaluate_split(loaded, data, "dev", FeatureCache(cache_dir), DecodeSettings(beam_size=2), meteor=False)
    block = metrics["grounding"]
    assert "proxy" in block["boxes"] and block["detector_recall"] == 1.0   # the cat is named and found
    forced = block["references_forced"]
    assert forced["object_words"] == 3 and forced["detected"] == 3          # "cat" in each of chelsea's captions
    assert 0.0 <= forced["mass_in_box"] <= 1.0
    assert np.isclose(forced["pointing"] * 3, round(forced["pointing"] * 3), atol=1e-3)   # hits out of 3 words
    assert 0.0 < forced["entropy"] <= forced["entropy_uniform"] + 1e-6
    assert 0.0 < forced["box_area"] < 1.0


def test_scst_reward_is_pycocoevalcap_cider_and_fine_tuning_raises_it(tiny_data, cache_dir, tmp_path):
    from pycocoevalcap.cider.cider import Cider

    from viewer.training.scst import CiderReward
    from viewer.training.train import TrainConfig, train

    refs = {"a": ["a dog runs on the grass", "a brown dog running in a field"],
            "b": ["two children play on a beach", "kids playing in the sand by the sea"],
            "c": ["a man rides a red bike", "a cyclist on a street"]}
    preds = {"a": "a dog running on grass", "b": "children play on the beach", "c": "a man on a bike"}
    _, direct = Cider().compute_score(refs, {k: [v] for k, v in preds.items()})
    ours = CiderReward(refs)(list(preds), list(preds.values()))
    assert ours == pytest.approx(direct, rel=1e-9)   # same corpus -> same document frequencies -> same scores

    out = str(tmp_path / "xe")
    small = {"hidden_dim": 64, "embed_dim": 32, "att_dim": 32, "proj_dim": 64, "dropout": 0.0}
    cfg = TrainConfig(model="sat-soft", data=tiny_data, out=out, epochs=2, batch_images=3, lr=3e-3, min_freq=1,
                      patience=10, cache=cache_dir, hparams=small)
    train(cfg, log=lambda *a: None)
    scst = TrainConfig(model="sat-soft", data=tiny_data, out=str(tmp_path / "scst"), epochs=4, batch_images=1,
                       lr=2e-3, min_freq=1, patience=10, cache=cache_dir, hparams=small, scst=True,
                       init_from=os.path.join(out, "last.safetensors"))
    train(scst, log=lambda *a: None)
    log = [json.loads(line) for line in open(os.path.join(str(tmp_path / "scst"), "log.jsonl"))]
    assert len(log) == 4 and "cider" in log[0]
    assert (log[-1]["cider"] + log[-2]["cider"]) / 2 > log[0]["cider"]   # sampled captions' CIDEr-D rises
