"""Shared fixtures: a tiny captioned dataset made from assets/, and small models trained on it.

The tiny models are trained by the tests themselves (a few hundred steps on six photos), so
decoding, checkpoint and CLI tests exercise real trained weights without the shipped ones.
"""
from __future__ import annotations

import os
import shutil

import pytest
import torch
from hypothesis import settings

# Generated cases per loader (tests/test_fuzz.py): a few hundred in `make test`, thousands with --fuzz.
settings.register_profile("ci", max_examples=200, database=None)      # no example files written
settings.register_profile("fuzz", max_examples=3000, database=None)


def pytest_addoption(parser):
    parser.addoption("--fuzz", action="store_true", help="run thousands of generated cases per loader (test_fuzz.py)")


def pytest_configure(config):
    settings.load_profile("fuzz" if config.getoption("--fuzz") else "ci")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(ROOT, "assets")

CAPTIONS = {
    "astronaut.jpg": ["a woman in an orange space suit smiles in front of a flag",
                      "an astronaut holds a helmet and smiles",
                      "a smiling woman in a space suit poses with a flag"],
    "coffee.jpg": ["a cup of coffee sits on a saucer on a table",
                   "a white cup of coffee with a spoon on a saucer",
                   "a cup of coffee on a red table"],
    "chelsea.jpg": ["a tabby cat looks to the side",
                    "a small cat with stripes sits on a mat",
                    "a cat with green eyes looks at something"],
    "rocket.jpg": ["a rocket lifts off from a launch pad",
                   "a white rocket launches into the blue sky",
                   "a rocket takes off with smoke and fire"],
    "motorcycle.jpg": ["a red motorcycle is parked in a room",
                       "a motorcycle stands in front of a wall",
                       "a shiny motorcycle parked indoors"],
    "grace_hopper.jpg": ["a woman in a navy uniform poses for a portrait",
                         "an old portrait of an officer in uniform",
                         "a woman in uniform with medals smiles"],
}
MODEL_TYPES = ("sat-soft", "sat-hard", "updown", "transformer")
SHIPPED = ("sat-soft", "sat-hard", "updown", "transformer")
LSTM_SIZES = {"embed_dim": 32, "hidden_dim": 64, "att_dim": 32}
TINY_HPARAMS = {   # small versions of each model type, for the tests' own training
    "sat-soft": {**LSTM_SIZES, "proj_dim": 64, "attention": "soft"},
    "sat-hard": {**LSTM_SIZES, "proj_dim": 64, "attention": "hard"},
    "updown": LSTM_SIZES,
    "transformer": {"dim": 32, "layers": 2, "heads": 4},
}


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> str:
    """A Flickr8k-layout folder: all six photos in train, two of them also in dev."""
    root = tmp_path_factory.mktemp("tiny_data")
    os.makedirs(root / "images")
    lines = []
    for name, caps in CAPTIONS.items():
        shutil.copy(os.path.join(ASSETS, name), root / "images" / name)
        lines += [f"{name}#{i}\t{c}" for i, c in enumerate(caps)]
    (root / "captions.txt").write_text("\n".join(lines) + "\n")
    (root / "train_images.txt").write_text("\n".join(CAPTIONS) + "\n")
    (root / "dev_images.txt").write_text("chelsea.jpg\nrocket.jpg\n")
    return str(root)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("feature_cache"))


@pytest.fixture(scope="session")
def vision():
    from viewer.engine.vision import VisionStack
    return VisionStack("cpu")


@pytest.fixture(scope="session")
def tiny_corpus(tiny_data, cache_dir, vision):
    """The tiny training split, ready to batch: (paths, feature cache, vocabulary, encoded captions)."""
    from viewer.data.cache import FeatureCache
    from viewer.data.datasets import load_dataset
    from viewer.engine.vocab import Vocabulary

    data = load_dataset(tiny_data)
    paths = data.split("train")
    cache = FeatureCache(cache_dir)
    cache.build(paths, vision, log=lambda *a: None)
    vocab = Vocabulary.build((c for p in paths for c in data.captions[p]), min_freq=1)
    encoded = {p: [[vocab.start] + vocab.encode(c) + [vocab.end] for c in data.captions[p]] for p in paths}
    return paths, cache, vocab, encoded


@pytest.fixture(scope="session")
def tiny_checkpoints(tiny_corpus, tmp_path_factory) -> str:
    """A folder with one small trained checkpoint per model type, named like the shipped ones."""
    from viewer.engine import checkpoints
    from viewer.engine.models import build_model
    from viewer.training.train import FeatureTable, make_batch

    folder = tmp_path_factory.mktemp("checkpoints")
    paths, cache, vocab, encoded = tiny_corpus
    for model_type in MODEL_TYPES:
        torch.manual_seed(0)
        table = FeatureTable(paths, cache, "regions" if model_type == "updown" else "grid")
        hparams = {**TINY_HPARAMS[model_type], "vocab_size": len(vocab), "dropout": 0.0,
                   "feature_dim": table.feats.shape[-1]}
        model = build_model(model_type, **hparams)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        feats, mask = table.batch(paths, "cpu")
        tokens, image_index, _ = make_batch(paths, encoded, "cpu")
        model.train()
        for _ in range(150):
            loss, _ = model.loss(feats, mask, tokens, image_index)
            opt.zero_grad()
            loss.backward()
            opt.step()
        checkpoints.save(str(folder / f"{model_type}.safetensors"), model, vocab, model_type, model_type, hparams,
                         {"training": {"data": "tests/tiny"}})
    _train_answerer(folder, paths, cache)
    return str(folder)


def tiny_questions(paths) -> list:
    """Questions the rules of data/questions.py read from the tiny captions (each caption alone)."""
    from viewer.data import questions as qa
    reader = qa.CaptionReader(qa.verb_bases(c for caps in CAPTIONS.values() for c in caps))
    out = []
    for p in paths:
        for caption in CAPTIONS[os.path.basename(p)]:
            parts = reader.read(caption)
            out += [qa.Question(p, t, q, a, 1) for t, q, a, _ in (qa.questions_of(parts) if parts else [])]
    return out


def _train_answerer(folder, paths, cache) -> None:
    """A small vqa-regions model trained on the tiny questions, saved as `vqa-regions`."""
    from viewer.engine import checkpoints
    from viewer.engine.models import build_model
    from viewer.engine.vocab import SPECIALS, Vocabulary
    from viewer.training.train import FeatureTable
    from viewer.training.train_qa import encode
    items = tiny_questions(paths)
    words = Vocabulary.build((q.question for q in items), min_freq=1)
    answers = Vocabulary(SPECIALS + sorted({q.answer for q in items}))
    table = FeatureTable(paths, cache, "regions")
    hparams = {"vocab_size": len(answers), "feature_dim": table.feats.shape[-1], "question_vocab_size": len(words),
               "embed_dim": 32, "hidden_dim": 64, "dropout": 0.0}
    torch.manual_seed(0)
    model = build_model("vqa-regions", **hparams)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    q, a = encode(items, words, answers)
    feats, mask = table.batch([x.photo for x in items], "cpu")
    for _ in range(150):
        loss = model.loss_on(feats, mask, q, a)
        opt.zero_grad()
        loss.backward()
        opt.step()
    checkpoints.save(str(folder / "vqa-regions.safetensors"), model, answers, "vqa-regions", "vqa-regions", hparams,
                     {"task": "answer", "question_vocab": words.words, "training": {"data": "tests/tiny"}})


@pytest.fixture(scope="session")
def captioner(tiny_checkpoints):
    from viewer.engine.pipeline import Captioner
    return Captioner("cpu", checkpoint_dir=tiny_checkpoints)


@pytest.fixture
def photo():
    from viewer.engine.images import load_photo
    return load_photo(os.path.join(ASSETS, "coffee.jpg"))


@pytest.fixture(scope="session")
def server(tiny_checkpoints):
    """The app on a free loopback port, in this process, on the tiny models: (url, studio)."""
    from viewer.app import create_app, free_port, launch
    demo, studio = create_app("cpu", tiny_checkpoints)
    port = free_port()
    launch(demo, "127.0.0.1", port, block=False)
    yield f"http://127.0.0.1:{port}/", studio
    demo.close()
