"""Training on COCO pseudo-pairs (`train --world`): the word-level gate's weights reach the loss, a
warm start keeps the rows of the words both vocabularies know, and a run on a tiny world folder."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
import torch.nn.functional as F

from viewer.data import world
from viewer.engine.models.base import token_cross_entropy
from viewer.engine.vocab import SPECIALS, Vocabulary, tokenize
from viewer.training.train import TrainConfig, check_config, make_batch, remap_vocabulary, train

ASSETS = os.path.join(os.path.dirname(__file__), "..", "assets")


def test_the_gate_keeps_full_weight_only_on_objects_the_detector_found():
    words = tokenize("a dog catches a frisbee next to a hot dog stand")
    assert world.gate_weights(words, frozenset({"dog"}), 0.2) == [0.2, 1, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]
    # "hot dog" is one object (CHAIR's two-word rule): both its words, and not the first "dog"
    assert world.gate_weights(words, frozenset({"hot dog"}), 0.2) == [0.2] * 8 + [1, 1, 0.2]
    assert world.gate_weights(tokenize("two men and some people"), frozenset({"person"}), 0.5) == [0.5, 1, 0.5, 0.5, 1]


def test_token_weights_scale_each_tokens_loss_and_padding_stays_out():
    torch.manual_seed(0)
    logits = torch.randn(3, 2, 7)                               # (T-1, N, V)
    tokens = torch.tensor([[1, 4, 5, 2], [1, 6, 2, 0]])         # the second caption is padded
    plain, per_token = token_cross_entropy(logits, tokens)
    want = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].T.flatten(), ignore_index=0)
    assert torch.isclose(plain, want)
    weights = torch.tensor([[1.0, 0.0, 0.5], [0.25, 1.0, 9.0]])   # 9.0 sits on padding: no effect
    weighted, _ = token_cross_entropy(logits, tokens, weights)
    by_hand = (per_token[0, 0] + 0.5 * per_token[2, 0] + 0.25 * per_token[0, 1] + per_token[1, 1]) / 5
    assert torch.isclose(weighted, by_hand)


def test_a_batch_carries_each_captions_weights_in_its_row():
    encoded = {"a": [[1, 4, 2], [1, 4, 5, 6, 2]], "b": [[1, 7, 8, 2]]}
    weights = {"b": [[1.0, 0.25, 0.5]]}
    tokens, image_index, w = make_batch(["a", "b"], encoded, "cpu", weights)
    assert tokens.shape == (3, 5) and image_index.tolist() == [0, 0, 1] and w.shape == (3, 4)
    assert w[0].tolist() == [1, 1, 1, 1] and w[1].tolist() == [1, 1, 1, 1] and w[2, :3].tolist() == [1.0, 0.25, 0.5]
    assert make_batch(["a"], encoded, "cpu", weights)[2] is None   # no pseudo-caption in the batch: plain loss


def test_a_warm_start_keeps_the_rows_of_the_words_both_vocabularies_know():
    old = Vocabulary(SPECIALS + ["dog", "man", "grass"])
    new = Vocabulary(SPECIALS + ["man", "cat", "dog", "oven", "grass"])
    torch.manual_seed(0)
    trained = {"embed.weight": torch.randn(len(old), 3), "out.weight": torch.randn(len(old), 5),
               "out.bias": torch.randn(len(old)), "label_words": torch.randn(2, len(old)), "lstm.w": torch.randn(5, 3)}
    fresh = {"embed.weight": torch.zeros(len(new), 3), "out.weight": torch.zeros(len(new), 5),
             "out.bias": torch.zeros(len(new)), "label_words": torch.zeros(2, len(new)), "lstm.w": torch.zeros(5, 3)}
    got = remap_vocabulary(trained, old, new, fresh)
    for word in SPECIALS + ["dog", "man", "grass"]:
        i, j = new.index[word], old.index[word]
        assert torch.equal(got["embed.weight"][i], trained["embed.weight"][j])
        assert torch.equal(got["out.bias"][i], trained["out.bias"][j])
        assert torch.equal(got["label_words"][:, i], trained["label_words"][:, j])
    for word in ["cat", "oven"]:
        assert not got["embed.weight"][new.index[word]].any() and not got["out.bias"][new.index[word]].any()
    assert torch.equal(got["lstm.w"], trained["lstm.w"])
    with pytest.raises(ValueError, match="not a change of vocabulary"):
        remap_vocabulary({"lstm.w": torch.randn(4, 3)}, old, new, fresh)


def test_settings_that_mean_nothing_are_refused():
    base = dict(model="sat-soft", data="d", out="o")
    for cfg, message in [(TrainConfig(**base, gate=0.5), "give --world"), (TrainConfig(**base, gate=0.0), r"\(0, 1\]"),
                         (TrainConfig(**base, world="w"), "needs --coco")]:
        with pytest.raises(ValueError, match=message):
            check_config(cfg)


def world_folder(root, photos: dict[str, list[str]], labels: dict[str, list[str]], choice: list[str], words):
    """A world-data folder over COCO-named copies of the example photos."""
    os.makedirs(root / "coco" / "images")
    names = {}
    for i, asset in enumerate(list(photos) + choice):
        names[asset] = f"COCO_val2014_{i:012d}"
        shutil.copy(os.path.join(ASSETS, asset), root / "coco" / "images" / f"{names[asset]}.jpg")
    (root / "coco" / "photos.txt").write_text("".join(f"{n}.jpg\n" for n in names.values()))
    os.makedirs(root / "world" / "labels")
    world.write_json(str(root / "world" / "pseudo.json"), {"captions": {names[a]: c for a, c in photos.items()},
                                                          "keep": 5, "seed": 0, "threshold": 0.5})
    world.write_json(str(root / "world" / "split.json"), {"train": sorted(names[a] for a in photos),
                                                         "choice": [names[a] for a in choice]})
    world.write_json(str(root / "world" / "vocab.json"), {"words": SPECIALS + words, "added": [], "captions": {},
                                                         "min_count": 1})
    world.write_json(str(root / "world" / "labels" / "part-00000.json"), {
        names[a]: [{"label": label, "score": 0.9, "box": [0, 0, 1, 1]} for label in ls] for a, ls in labels.items()})
    return str(root / "world"), str(root / "coco")


def test_pseudo_pairs_are_read_by_path_and_a_choice_photo_among_them_is_refused(tmp_path):
    out, coco = world_folder(tmp_path, {"coffee.jpg": ["a cup of coffee on a table"]}, {"coffee.jpg": ["cup"]},
                             ["chelsea.jpg"], ["a", "cup", "of", "coffee", "on", "table"])
    pairs = world.pseudo_pairs(out, coco)
    (path,) = pairs.captions
    assert os.path.exists(path) and pairs.labels[path] == {"cup"} and "cup" in pairs.vocab.index
    pseudo = json.load(open(os.path.join(out, "pseudo.json")))
    pseudo["captions"]["COCO_val2014_000000000001"] = ["a cat"]   # chelsea: the choice part
    world.write_json(os.path.join(out, "pseudo.json"), pseudo)
    with pytest.raises(ValueError, match="choice part"):
        world.pseudo_pairs(out, coco)
    with pytest.raises(ValueError, match="not a world-data folder"):
        world.pseudo_pairs(str(tmp_path / "nowhere"), coco)


def test_a_world_run_trains_on_both_and_warm_starts_across_vocabularies(tiny_data, cache_dir, tmp_path):
    from viewer.engine import checkpoints
    hparams = {"hidden_dim": 64, "embed_dim": 32, "att_dim": 32, "proj_dim": 64, "dropout": 0.0}
    first = TrainConfig(model="sat-soft", data=tiny_data, out=str(tmp_path / "flickr"), epochs=1, batch_images=3,
                        min_freq=1, cache=cache_dir, hparams=hparams)
    train(first, log=lambda *a: None)
    flickr = checkpoints.load(str(tmp_path / "flickr" / "best.safetensors"))
    new_words = [w for w in ["cup", "coffee", "plate", "saucer", "espresso"] if w not in flickr.vocab.index][:3]
    words = flickr.vocab.words[len(SPECIALS):] + new_words
    out, coco = world_folder(tmp_path, {"coffee.jpg": ["a cup of coffee on a plate", "a white cup on a table"]},
                             {"coffee.jpg": ["cup"]}, ["chelsea.jpg"], words)
    lines = []
    cfg = TrainConfig(model="sat-soft", data=tiny_data, out=str(tmp_path / "world-run"), epochs=1, batch_images=3,
                      cache=cache_dir, hparams=hparams, world=out, coco=coco, gate=0.3,
                      init_from=str(tmp_path / "flickr" / "best.safetensors"), keep_epochs=True)
    train(cfg, log=lines.append)
    assert os.path.exists(tmp_path / "world-run" / "epoch-1.safetensors")
    assert any("7 train images" in str(line) for line in lines), lines   # six Flickr8k photos + one COCO photo
    assert any(f"{len(flickr.vocab)} of {len(flickr.vocab) + len(new_words)} words keep" in str(line) for line in lines), lines
    got = checkpoints.load(str(tmp_path / "world-run" / "last.safetensors"))
    assert got.vocab.words == SPECIALS + words
    assert "1 COCO photos with pseudo-captions" in got.meta["training"]["data"]
