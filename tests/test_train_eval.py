"""Training end to end on a tiny dataset, the metrics, dataset readers, vocabulary and feature cache."""
import json
import os

import numpy as np
import pytest

from viewer.data.cache import FeatureCache
from viewer.data.datasets import load_dataset, read_coco, read_karpathy
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
    from viewer.data.datasets import CaptionSet, half_of
    from viewer.training.train import TrainConfig, scored_dev_photos

    dev = [f"/d/images/{i}.jpg" for i in range(40)]
    data = CaptionSet("/d", splits={"train": [], "dev": dev})
    cfg = TrainConfig(model="sat-soft", data="/d", out="/tmp/unused", dev_images=5, dev_split="dev")
    assert scored_dev_photos(data, cfg) == dev[:5]
    cfg.dev_split = "dev-select"
    chosen = scored_dev_photos(data, cfg)
    assert len(chosen) == 5 and {half_of(p) for p in chosen} == {"select"}
    assert chosen == [p for p in dev if half_of(p) == "select"][:5]
    cfg.dev_images = 0
    assert {half_of(p) for p in scored_dev_photos(data, cfg)} == {"select"}


def test_training_scores_only_the_chosen_dev_photos_after_each_epoch(tiny_data, cache_dir, tmp_path, monkeypatch):
    """`train` early-stops on `scored_dev_photos`, not on the whole dev split (tiny dev: chelsea, rocket)."""
    import viewer.training.train as T

    class Scored(Exception):
        pass

    def spy(loaded, data, split, *a, **kw):
        raise Scored(data.split(split))

    monkeypatch.setattr(T, "evaluate_split", spy)
    cfg = T.TrainConfig(model="sat-soft", data=tiny_data, out=str(tmp_path / "run"), epochs=1, batch_images=6,
                        min_freq=1, cache=cache_dir, dev_images=1, dev_split="dev",
                        hparams={"hidden_dim": 16, "embed_dim": 8, "att_dim": 8, "proj_dim": 16, "dropout": 0.0})
    with pytest.raises(Scored) as scored:
        T.train(cfg, log=lambda *a: None)
    dev = load_dataset(tiny_data).split("dev")
    assert len(dev) == 2 and scored.value.args[0] == dev[:1] == T.scored_dev_photos(load_dataset(tiny_data), cfg)


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
    from viewer.data.datasets import load_dataset
    from viewer.engine.decoding import DecodeSettings
    from viewer.analysis.evaluate import evaluate_split

    loaded = checkpoints.load(os.path.join(tiny_checkpoints, f"{model}.safetensors"))
    data = load_dataset(tiny_data)
    metrics, _ = evaluate_split(loaded, data, "dev", FeatureCache(cache_dir), DecodeSettings(beam_size=2), meteor=False)
    block = metrics["grounding"]
    assert "proxy" in block["boxes"] and block["detector_recall"] == 1.0   # the cat is named and found
    forced = block["references_forced"]
    assert forced["object_words"] == 4 and forced["detected"] == 4          # "cat" in each of chelsea's captions, "tabby" (CHAIR's list: a cat) in one
    # the same numbers computed here from the forced attention, without the grounding module
    want = _forced_grounding_by_hand(loaded, data, FeatureCache(cache_dir))
    assert forced["pointing"] == round(want["hits"] / 3, 4)
    assert np.isclose(forced["mass_in_box"], want["mass"], atol=0.03)     # fine sampling vs the 1/112 raster
    assert np.isclose(forced["box_area"], want["area"], atol=0.02)
    assert np.isclose(forced["entropy"], want["entropy"], atol=1e-4)
    assert np.isclose(forced["entropy_uniform"], want["uniform"], atol=1e-4)
    assert forced["entropy"] < forced["entropy_uniform"]


def _share_inside(units: np.ndarray, boxes: np.ndarray, n: int = 40) -> np.ndarray:
    """(K,) the share of each unit's area inside the union of `boxes`, by n x n sample points."""
    out = []
    for x1, y1, x2, y2 in np.asarray(units, np.float64):
        xs, ys = np.meshgrid(x1 + (np.arange(n) + 0.5) * (x2 - x1) / n, y1 + (np.arange(n) + 0.5) * (y2 - y1) / n)
        out.append(np.any([(b[0] <= xs) & (xs <= b[2]) & (b[1] <= ys) & (ys <= b[3]) for b in boxes], 0).mean())
    return np.array(out)


def _forced_grounding_by_hand(loaded, data, cache) -> dict:
    """Force every dev reference through the model; for chelsea's "cat": pointing hits, mass in the
    cat boxes, their area; the mean entropy of all emitted words and of uniform attention."""
    from viewer.engine.decoding import DecodeSettings
    from viewer.engine.images import cell_boxes
    from viewer.analysis.generation import generate

    hits, mass, entropies, uniform, area = 0, [], [], [], None
    for path in data.split("dev"):
        item = cache.load(path)
        refs = [loaded.vocab.encode(r) + [loaded.vocab.end] for r in data.captions[path]]
        hyps = generate(loaded, [item] * len(refs), list(range(len(refs))), DecodeSettings(strategy="forced"),
                        prefixes=refs)
        units = cell_boxes(1, 1, 14) if loaded.attends_to == "grid" else np.asarray(item.regions.boxes, np.float64)
        boxes = item.regions.boxes[np.array(item.regions.labels) == "cat"]
        for ids, hyp in zip(refs, hyps.values()):
            attention = hyp.attention.double().numpy()[:, :len(units)]
            words = loaded.vocab.decode(ids)
            for t, word in enumerate(words):
                if word == "<end>":
                    continue
                a = attention[t]
                entropies.append(-(a[a > 0] * np.log(a[a > 0])).sum())
                uniform.append(np.log(len(units)))
                if word == "cat":
                    x1, y1, x2, y2 = units[int(np.argmax(a))]
                    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
                    hits += any(b[0] <= cx <= b[2] and b[1] <= cy <= b[3] for b in boxes)
                    mass.append(float((a * _share_inside(units, boxes)).sum()))
                    area = float(_share_inside(np.array([[0.0, 0.0, 1.0, 1.0]]), boxes, 400)[0])
    assert len(mass) == 3
    return {"hits": hits, "mass": float(np.mean(mass)), "area": area, "entropy": float(np.mean(entropies)),
            "uniform": float(np.mean(uniform))}


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
    scst = TrainConfig(model="sat-soft", data=tiny_data, out=str(tmp_path / "scst"), epochs=8, batch_images=1,
                       lr=2e-3, min_freq=1, patience=10, cache=cache_dir, hparams=small, scst=True,
                       init_from=os.path.join(out, "last.safetensors"))
    train(scst, log=lambda *a: None)
    log = [json.loads(line) for line in open(os.path.join(str(tmp_path / "scst"), "log.jsonl"))]
    assert len(log) == 8 and "cider" in log[0]
    cider = [e["cider"] for e in log]   # sampled captions' CIDEr-D rises (a noisy curve: 6 photos, one per batch)
    assert np.mean(cider[-3:]) > np.mean(cider[:2])


def test_a_run_resumes_only_with_the_classes_it_held_out(tiny_data, cache_dir, tmp_path):
    """--hold-out drops the training captions naming a class; resuming the run without it (or with
    other classes) would mix two protocols in one run, so it is refused."""
    from viewer.training.train import TrainConfig, train
    cfg = TrainConfig(model="sat-soft", data=tiny_data, out=str(tmp_path / "run"), epochs=1, batch_images=3, lr=3e-3,
                      min_freq=1, cache=cache_dir, hold_out=("dog",),
                      hparams={"hidden_dim": 32, "embed_dim": 16, "att_dim": 16, "proj_dim": 32, "dropout": 0.0})
    said = []
    train(cfg, log=said.append)
    assert any("held out dog" in str(line) for line in said)
    cfg.epochs, cfg.resume, cfg.hold_out = 2, True, ()
    with pytest.raises(ValueError, match="holding out dog, not nothing"):
        train(cfg, log=lambda *a: None)
    cfg.hold_out = ("dog",)
    train(cfg, log=lambda *a: None)   # the same classes: it goes on


def test_feature_cache_keeps_photos_that_share_a_name_apart(tmp_path):
    """Two photos both called photo.jpg, in two folders: each gets its own features (the cache is keyed
    by the file's bytes; a stand-in encoder gives each photo its mean pixel)."""
    import shutil
    from types import SimpleNamespace

    import torch
    from conftest import ASSETS
    from viewer.engine.vision import ImageFeatures, Regions
    paths = []
    for folder, source in (("a", "coffee.jpg"), ("b", "rocket.jpg")):
        os.makedirs(tmp_path / folder)
        shutil.copy(os.path.join(ASSETS, source), tmp_path / folder / "photo.jpg")
        paths.append(str(tmp_path / folder / "photo.jpg"))
    empty = Regions(np.zeros((0, 4), np.float32), [], np.zeros(0, np.float32))
    vision = SimpleNamespace(extract=lambda photos: [
        ImageFeatures(torch.full((1, 4), float(p.rgb.mean())), empty) for p in photos])
    cache = FeatureCache(str(tmp_path / "cache"))
    cache.build(paths, vision, log=lambda *a: None)
    assert cache.missing(paths) == []
    a, b = (cache.load(p).grid for p in paths)
    assert not torch.equal(a, b)
