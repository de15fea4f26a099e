"""updown-copy (models/updown_copy.py): object words copied from the labels of the regions looked at."""
import os

import numpy as np
import pytest
import torch

from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.models import build_model
from viewer.engine.trace import AttentionTrace, build_trace
from viewer.engine.vision import ImageFeatures, model_inputs
from viewer.engine.vision.boxes import CONTEXT, Regions
from viewer.engine.vision.regions import COCO_LABELS
from viewer.engine.vocab import Vocabulary
from viewer.training.train import label_words, warm_start

VOCAB = Vocabulary.build(["a bear walks in the grass", "two bears and a dog", "a man and a puppy"], min_freq=1)
BEAR, DOG = COCO_LABELS.index("bear"), COCO_LABELS.index("dog")
SIZES = {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16, "dropout": 0.0}


def _copy_model(gate: float) -> torch.nn.Module:
    """A random updown-copy whose p(copy) is `gate` for every state (its gate's weights zeroed)."""
    torch.manual_seed(0)
    model = build_model("updown-copy", vocab_size=len(VOCAB), feature_dim=9, **SIZES).eval()
    model.label_words.copy_(label_words(VOCAB))
    with torch.no_grad():
        model.copy_gate.weight.zero_()
        model.copy_gate.bias.fill_(float(np.log(gate / (1 - gate))))
    return model


def _feats(classes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    feats = torch.randn(1, len(classes), 9)
    feats[0, :, -1] = torch.tensor(classes, dtype=torch.float)
    return feats, torch.ones(1, len(classes), dtype=torch.bool)


def test_the_label_table_names_each_class_with_its_words_and_plurals():
    table = label_words(VOCAB)
    named = lambda c: {VOCAB.words[i] for i in table[c].nonzero().flatten().tolist()}  # noqa: E731
    assert named(BEAR) == {"bear", "bears"}
    assert named(DOG) == {"dog", "puppy"}
    assert {"man"} <= named(COCO_LABELS.index("person"))
    assert not table[0].any()   # index 0: the context regions and anything unnamed copy nothing


def test_a_bear_region_with_all_the_attention_gives_bear_through_the_copy_path_and_its_map_is_that_region():
    model = _copy_model(gate=1 - 1e-6)
    feats, mask = _feats([BEAR, 0, 0])
    mask[0, 1:] = False   # all the attention on the bear's region
    hyp = decode(model, feats, mask, DecodeSettings(strategy="greedy", max_len=3), VOCAB)[0][0]
    assert VOCAB.words[hyp.tokens[0]] in ("bear", "bears")
    assert hyp.attention[0].tolist()[:1] == [pytest.approx(1.0)] and hyp.copy[0] > 0.99
    # the step's words: all of p on the class's words, split in the generator's proportions
    with torch.no_grad():
        step, _ = model.forward_step(model.init_state(feats, mask), torch.tensor([VOCAB.start]))
    p = step.logits.exp()[0]
    assert float(p[VOCAB.index["bear"]] + p[VOCAB.index["bears"]]) == pytest.approx(1.0, abs=1e-4)


def test_the_copy_mixture_is_the_published_formula_worked_by_hand():
    """p(w) = (1 - g) P(w) + g [sum_c A_c P(w) / P(words of c) for w naming c + A_0 P(w)]."""
    model = _copy_model(gate=0.3)
    feats, mask = _feats([BEAR, DOG, 0, 0])
    state = model.init_state(feats, mask)
    step, new = model.forward_step(state, torch.tensor([VOCAB.start]))
    alpha, h2, _ = model.attend_and_read(state, torch.tensor([VOCAB.start]))
    gen = torch.softmax(model.out(h2), -1)[0].double()
    a = alpha[0].double()
    bear = [VOCAB.index[w] for w in ("bear", "bears")]
    dog = [VOCAB.index[w] for w in ("dog", "puppy")]
    copy = gen * (a[2] + a[3])
    copy[bear] += a[0] * gen[bear] / gen[bear].sum()
    copy[dog] += a[1] * gen[dog] / gen[dog].sum()
    expected = 0.7 * gen + 0.3 * copy
    assert torch.allclose(step.logits.exp()[0].double(), expected, atol=1e-6)
    assert step.copy.item() == pytest.approx(0.3, abs=1e-6) and torch.equal(step.attention, alpha)


def test_model_inputs_end_each_region_with_its_class_index():
    regions = Regions(np.array([[0, 0, .5, .5], [.2, .2, .9, .9], *CONTEXT.values()], np.float32),
                      ["bear", "teddy bear", *CONTEXT], np.ones(2 + len(CONTEXT), np.float32))
    item = ImageFeatures(torch.randn(196, 8), regions)
    plain, _ = model_inputs([item], "regions")
    labelled, mask = model_inputs([item], "regions", labels=True)
    assert torch.equal(labelled[..., :-1], plain)
    assert labelled[0, :, -1].tolist() == [BEAR, COCO_LABELS.index("teddy bear")] + [0] * len(CONTEXT)


def test_a_warm_start_from_updown_loads_every_weight_and_only_the_gate_starts_fresh():
    torch.manual_seed(1)
    updown = build_model("updown", vocab_size=len(VOCAB), feature_dim=8, **SIZES)
    copy = build_model("updown-copy", vocab_size=len(VOCAB), feature_dim=9, **SIZES)
    said = []
    warm_start(copy, updown, said.append)
    assert all(torch.equal(v, copy.state_dict()[k]) for k, v in updown.state_dict().items())
    assert "copy_gate.weight" in said[0] and "label_words" in said[0]
    sat = build_model("sat-soft", vocab_size=len(VOCAB), feature_dim=8, **SIZES)
    with pytest.raises(ValueError, match="cannot warm-start UpDownCopy from"):
        warm_start(copy, sat, said.append)
    with pytest.raises(ValueError, match="unexpected"):
        warm_start(updown, copy, said.append)   # the other way: the copy's own parts are left over


def test_p_copy_is_on_every_step_of_the_trace_and_survives_json():
    model = _copy_model(gate=0.4)
    feats, mask = _feats([BEAR, DOG, 0])
    hyp = decode(model, feats, mask, DecodeSettings(strategy="beam", beam_size=2, max_len=4), VOCAB)[0][0]
    regions = Regions(np.tile(np.array([[0, 0, 1, 1]], np.float32), (3, 1)), ["bear", "dog", "whole image"],
                      np.ones(3, np.float32))
    trace = build_trace(hyp, VOCAB, "updown-copy", "regions", 224, 224, regions=regions)
    assert all(s.copy == pytest.approx(0.4, abs=1e-5) for s in trace.steps)
    back = AttentionTrace.from_json(trace.to_json())
    assert [s.copy for s in back.steps] == [pytest.approx(s.copy, abs=1e-6) for s in trace.steps]


def test_updown_copy_trains_from_an_updown_checkpoint_and_its_table_ships_with_the_weights(tiny_data, cache_dir, tmp_path):
    from viewer.engine import checkpoints
    from viewer.training.train import TrainConfig, train

    sizes = {"hidden_dim": 32, "embed_dim": 16, "att_dim": 16, "dropout": 0.0}
    base = TrainConfig(model="updown", data=tiny_data, out=str(tmp_path / "updown"), epochs=1, batch_images=3,
                       lr=3e-3, min_freq=1, cache=cache_dir, hparams=sizes)
    train(base, log=lambda *a: None)
    said = []
    cfg = TrainConfig(model="updown-copy", data=tiny_data, out=str(tmp_path / "copy"), epochs=2, batch_images=3,
                      lr=3e-3, min_freq=1, cache=cache_dir, hparams=sizes,
                      init_from=str(tmp_path / "updown" / "best.safetensors"))
    train(cfg, log=said.append)
    assert any("copy_gate.weight" in str(line) for line in said)
    best = checkpoints.load(str(tmp_path / "copy" / "best.safetensors"))
    assert best.model.reads_labels and torch.equal(best.model.label_words.float(), label_words(best.vocab))
    assert best.meta["hparams"]["feature_dim"] == 1286   # 1280 grid + box geometry + the class index
    # the live path: a photo through the detector and the copy model, p(copy) on every step, the map its own
    import shutil
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    from conftest import ASSETS
    shutil.copy(tmp_path / "copy" / "best.safetensors", tmp_path / "updown-copy.safetensors")
    trace = Captioner("cpu", checkpoint_dir=str(tmp_path)).caption(
        [load_photo(os.path.join(ASSETS, "motorcycle.jpg"))], "updown-copy")[0][0]
    assert trace.attends_to == "regions" and all(0 <= s.copy <= 1 for s in trace.steps)
    assert all(len(s.attention) == len(trace.region_labels) for s in trace.steps)


def test_the_app_measures_the_dependence_of_a_copy_models_words(tmp_path, tiny_checkpoints):
    """Photo-space analyses (explanations, visual dependence) rebuild the decoder's inputs from the
    encoder grid: with the class column for updown-copy (the app's seen/guessed colouring)."""
    from viewer.app import session as S
    from viewer.engine.pipeline import Captioner
    from conftest import ASSETS
    from viewer.engine import checkpoints
    vocab = checkpoints.load(os.path.join(tiny_checkpoints, "updown.safetensors")).vocab
    hparams = {**SIZES, "vocab_size": len(vocab), "feature_dim": 1286}
    model = build_model("updown-copy", **hparams)
    model.label_words.copy_(label_words(vocab))
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    checkpoints.save(str(folder / "updown-copy.safetensors"), model, vocab, "updown-copy", "updown-copy", hparams,
                     {"training": {"data": "tests/tiny"}})
    captioner = Captioner("cpu", checkpoint_dir=str(folder))
    studio = S.Studio(captioner)
    ex = studio.explore(os.path.join(ASSETS, "motorcycle.jpg"), "updown-copy", DecodeSettings(strategy="greedy", max_len=4))
    dependence = studio.visual_dependence(ex)
    assert dependence is not None and len(dependence) == ex.n_steps and np.isfinite(dependence).all()

