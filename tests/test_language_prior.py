"""The guessed verdict (viewer/analysis/language_prior.py): would the model have said the word of
most other, in-distribution photos after the same words? On constructed models and photos."""
from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from viewer.analysis import language_prior as lp
from viewer.analysis.answers import dependence_block
from viewer.analysis.explain import Pipeline
from viewer.analysis.pixel_faithfulness import seen_dependence

OLD_RULE = 0.3   # nats: the old rule called a word "looked" when hiding the photo cost it this much
from viewer.data.datasets import half_of, read_flickr8k
from viewer.data.questions import Question
from viewer.engine.images import GRID, AttendsTo, Photo, squash
from viewer.engine.models.base import CaptionModel, Step
from viewer.engine.vision import FeatureSource, ImageFeatures
from viewer.engine.vocab import SPECIALS, Vocabulary

VOCAB = Vocabulary(SPECIALS + ["a", "bright", "thing"])
BLOCK = [r * GRID + c for r in range(2, 5) for c in range(9, 12)]   # the cells only "this photo" has texture on


def cell_encoder(images: torch.Tensor) -> torch.Tensor:
    """A stand-in grid encoder: per 16x16 cell, the pixels' std (texture) -> (N, 196, 1)."""
    x = images.float().mean(-1)
    cells = x.reshape(len(x), GRID, 16, GRID, 16).permute(0, 1, 3, 2, 4).reshape(len(x), GRID * GRID, 256)
    return (cells.std(-1) / 64.0)[..., None]


class Toy(CaptionModel):
    """Every step's logits from `score(texture per cell)`: the logit of `word`; every other word 0."""

    def __init__(self, word: str, score):
        super().__init__()
        self.word, self.score = VOCAB.index[word], score

    def init_state(self, feats, mask, seed=None):
        return {"a": feats, "mask": mask}

    def forward_step(self, state, words):
        a = state["a"]
        logits = torch.zeros(len(a), len(VOCAB))
        logits[:, self.word] = self.score(a[..., 0])
        return Step(logits, torch.full((len(a), GRID * GRID), 1.0 / GRID ** 2)), state


class ToyCaptioner:
    """What Pipeline and References need of a Captioner, around a toy decoder and the cell encoder."""

    def __init__(self, model):
        self.device = torch.device("cpu")
        self.vision = SimpleNamespace(encoder=cell_encoder)
        batch = lambda items, device: (torch.stack([i.grid for i in items]),   # noqa: E731
                                       torch.ones(len(items), GRID * GRID, dtype=torch.bool))
        self.lm = SimpleNamespace(name="toy", path="toy", model=model.eval(), vocab=VOCAB, attends_to=AttendsTo.GRID,
                                  image_encoder=None, vision_spec=SimpleNamespace(source=FeatureSource.OURS), batch=batch)

    def model(self, name):
        return self.lm

    def forced_ids(self, model, caption):
        return VOCAB.encode(caption) + [VOCAB.end]

    def inputs(self, lm, photos):
        return [ImageFeatures(cell_encoder(torch.from_numpy(squash(p))[None])[0]) for p in photos]


def noise(shape, seed) -> np.ndarray:
    return (np.random.default_rng(seed).random((*shape, 1)) > 0.5).repeat(3, -1).astype(np.uint8) * 255


def block_photo() -> Photo:
    """Grey with sharp noise on BLOCK's cells only: the one thing no reference photo has."""
    rgb = np.full((224, 224, 3), 128, np.uint8)
    rgb[32:80, 144:192] = noise((48, 48), 1)
    return Photo(rgb, 224, 224, "block")


def textured_photo() -> Photo:
    return Photo(noise((224, 224), 2), 224, 224, "noise")


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> lp.References:
    """A Flickr8k-layout folder whose dev-select photos are plain greys with texture away from BLOCK."""
    root = tmp_path_factory.mktemp("flickr")
    os.makedirs(root / "images")
    names = [f"ref{i}.jpg" for i in range(60)]
    names = [n for n in names if half_of(n) == "select"][:12]
    for i, n in enumerate(names):
        rgb = np.full((224, 224, 3), 60 + 12 * i, np.uint8)
        rgb[160:, :64] = noise((64, 64), 10 + i)
        Image.fromarray(rgb).save(root / "images" / n, quality=95)
    (root / "captions.txt").write_text("".join(f"{n}#0\ta photo\n" for n in names))
    (root / "dev_images.txt").write_text("\n".join(names) + "\n")
    return lp.References.of(read_flickr8k(str(root)), k=8)


def prior_of(model, photo, caption, references) -> tuple[lp.Prior, Pipeline]:
    pipe = Pipeline(ToyCaptioner(model), photo, "toy", caption)
    return lp.caption_prior(pipe, references), pipe


def test_a_word_the_photo_does_not_change_would_have_been_said_of_most_photos(references):
    found, pipe = prior_of(Toy("thing", lambda texture: torch.full(texture.shape[:1], 2.0)), block_photo(), "thing",
                           references)
    assert found.k == 8 and found.share[0] == 1.0 and found.said_of_most[0]
    assert lp.verdict("thing", bool(found.said_of_most[0])) == "guessed"


def test_a_word_read_from_what_only_this_photo_has_is_not(references):
    found, _ = prior_of(Toy("bright", lambda texture: 6.0 * texture[:, BLOCK].mean(1) - 2.0), block_photo(), "bright",
                        references)
    assert found.share[0] == 0.0 and not found.said_of_most[0]
    assert found.standing[0] == 1.0                 # more likely here than on every reference photo
    assert lp.verdict("bright", False) is None


def test_the_old_rules_failure_is_flagged(references):
    """The word moves when the photo is blurred or removed (the old rule: seen), but the model says it
    of every in-distribution photo: said from the words before it."""
    found, pipe = prior_of(Toy("thing", lambda texture: 1.0 + 6.0 * texture.mean(1)), textured_photo(), "thing",
                           references)
    assert seen_dependence(pipe)[0] > OLD_RULE      # what made the old rule call it looked
    assert found.said_of_most[0] and lp.said_not_seen(["thing"], found) == []   # guessed; names no object


def test_the_verdict_is_deterministic_with_its_seed(references):
    data = SimpleNamespace(splits={"dev": references.paths}, split=lambda name: references.paths)
    assert lp.reference_paths(data, 4, seed=3) == lp.reference_paths(data, 4, seed=3)
    assert lp.reference_paths(data, 4, seed=3) != lp.reference_paths(data, 4, seed=4)
    model = Toy("bright", lambda texture: 3.0 * texture.mean(1) - 0.2)
    first, second = (prior_of(model, block_photo(), "bright", lp.References(lp.reference_paths(data, 8)))[0]
                     for _ in range(2))
    assert np.array_equal(first.share, second.share) and np.array_equal(first.standing, second.standing)


def test_answers_are_guessed_by_the_new_rule_and_not_measured_without_references():
    items = [Question("a.jpg", "colour", "what colour is the dog?", "brown", "")] * 2
    block = dependence_block([2.0, 2.0], ["brown", "black"], items, blind=["brown", "white"], shares=[0.9, 0.1])
    assert block["guessed"] == 0.5 and block["same_as_blind_guessed"] == 1.0   # a large drop no longer says looked
    assert dependence_block([2.0, 2.0], ["brown", "black"], items, shares=[None, None])["guessed"] == "not measured"
