"""Question answering models (models/vqa.py) through the one decoding loop: a model whose answer
depends on one region looks there and changes its answer when that region is hidden; the blind
baseline sees no photo; an answer is a trace that round-trips through JSON and names its question."""
import json
import os

import numpy as np
import pytest
import torch

from viewer.engine import checkpoints
from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.models import build_model
from viewer.engine.trace import AttentionTrace, build_trace
from viewer.engine.vocab import SPECIALS, Vocabulary

from conftest import ASSETS

ANSWERS = Vocabulary(SPECIALS + ["bear", "dog", "kite"])
WORDS = Vocabulary(SPECIALS + ["what", "is", "there"])
K, D = 5, 8
GREEDY = DecodeSettings(strategy="greedy", max_len=2)
SMALL = {"embed_dim": 8, "hidden_dim": 32, "dropout": 0.0}


def one_region_world(n: int, seed: int):
    """Photos of K regions: one carries a marker (feature 0) and its answer (features 1-3, one-hot);
    the others carry other answers. Only a model that looks at the marked region answers right."""
    g = torch.Generator().manual_seed(seed)
    feats = torch.zeros(n, K, D)
    answer = torch.randint(0, 3, (n,), generator=g)
    marked = torch.randint(0, K, (n,), generator=g)
    for i in range(n):
        for r in range(K):
            feats[i, r, 1 + (answer[i] if r == marked[i] else torch.randint(0, 3, (), generator=g))] = 1.0
        feats[i, marked[i], 0] = 1.0
    feats[:, :, 4:] = torch.randn(n, K, D - 4, generator=g) * 0.1
    return feats, torch.ones(n, K, dtype=torch.bool), answer + len(SPECIALS), marked


def question(n: int) -> torch.Tensor:
    return torch.tensor([WORDS.encode("what is there")] * n)


@pytest.fixture(scope="module")
def looker():
    torch.manual_seed(0)
    model = build_model("vqa-regions", vocab_size=len(ANSWERS), feature_dim=D, question_vocab_size=len(WORDS), **SMALL)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    feats, mask, answers, _ = one_region_world(512, 0)
    for step in range(300):
        rows = torch.arange(step * 64, step * 64 + 64) % 512
        loss = model.loss_on(feats[rows], mask[rows], question(64), answers[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_the_answer_map_lies_on_the_region_the_answer_depends_on_and_hiding_it_changes_the_answer(looker):
    feats, mask, answers, marked = one_region_world(200, 1)
    hyps = [h[0] for h in decode(looker, feats, mask, GREEDY, ANSWERS, prompt=question(200))]
    said = torch.tensor([h.tokens[0] for h in hyps])
    assert (said == answers).float().mean() > 0.9
    assert all(h.tokens[1] == ANSWERS.end for h in hyps)                  # an answer, then <end>
    on_marked = torch.stack([h.attention[0, m] for h, m in zip(hyps, marked)])
    assert on_marked.mean() > 0.6
    hidden = mask.clone()
    hidden[torch.arange(200), marked] = False
    blind = [h[0] for h in decode(looker, feats, hidden, GREEDY, ANSWERS, prompt=question(200))]
    changed = torch.tensor([b.tokens[0] for b in blind]) != said
    assert changed.float().mean() > 0.4        # (a third of the other regions hold the same answer by chance)
    for b, m in zip(blind, marked):
        assert float(b.attention[0, m]) == 0.0                              # nothing hidden is looked at


def test_an_answer_is_grounded_on_the_detector_boxes_of_the_class_it_names(looker):
    """evaluate --questions' grounding: the map the answer was read from, against the boxes of the
    class the captions' answer names; a region model that looks at the marked region points there
    (mass ~ its attention), and neither an answer naming no class nor a model that does not look
    is grounded."""
    from types import SimpleNamespace

    from viewer.analysis.answers import answer_grounding, answer_grounding_block
    from viewer.data.questions import Question
    from viewer.engine.vision.boxes import Regions
    feats, mask, _, marked = one_region_world(40, 3)
    hyps = [h[0] for h in decode(looker, feats, mask, GREEDY, ANSWERS, prompt=question(40))]
    strips = np.array([[0.2 * r, 0.0, 0.2 * r + 0.2, 1.0] for r in range(K)], np.float32)   # K side-by-side boxes
    loaded = SimpleNamespace(model=looker, attends_to="regions")
    asked = Question("p.jpg", "object", "what is there?", "bears", 2)      # a plural names the class too
    found = []
    for i, (h, m) in enumerate(zip(hyps, marked)):
        labels = ["dog"] * K
        labels[m] = "bear"
        g = answer_grounding(loaded, asked, h, Regions(strips, labels, np.ones(K)), (100, 100), i)
        assert g["coco_class"] == "bear" and g["inside"] == pytest.approx(float(h.attention[0, m]), abs=0.02)
        assert g["hit"] == (int(h.attention[0].argmax()) == int(m))
        found.append(g)
    block = answer_grounding_block(found)
    assert block["detected"] == 40 and block["pointing"] > 0.9 and block["mass_in_box"] > 0.6
    assert block["mass_uniform_baseline"] == pytest.approx(0.2, abs=0.03)   # a strip, rasterised
    regions = Regions(strips, ["bear"] * K, np.ones(K))
    assert answer_grounding(loaded, Question("p.jpg", "colour", "what colour?", "red", 2), hyps[0], regions,
                            (100, 100), 0) is None
    blind = build_model("vqa-blind", vocab_size=len(ANSWERS), feature_dim=D, question_vocab_size=len(WORDS), **SMALL)
    assert answer_grounding(SimpleNamespace(model=blind, attends_to="regions"), asked, hyps[0], regions,
                            (100, 100), 0) is None


def test_steering_the_answer_to_a_region_reads_that_region(looker):
    feats, mask, answers, marked = one_region_world(50, 2)
    other = (marked + 1) % K
    maps = torch.zeros(50, K)
    maps[torch.arange(50), other] = 1.0
    hyps = [h[0] for h in decode(looker, feats, mask, GREEDY, ANSWERS, prompt=question(50), steer=(0, maps))]
    assert all(torch.equal(h.attention[0], m) for h, m in zip(hyps, maps))
    read = torch.tensor([h.tokens[0] for h in hyps])
    wanted = feats[torch.arange(50), other, 1:4].argmax(1) + len(SPECIALS)   # the steered region's own answer
    assert (read == wanted).float().mean() > 0.7


@pytest.mark.parametrize("name", ["vqa-blind", "vqa-bow", "vqa-grid", "vqa-regions"])
def test_every_answerer_needs_a_question_and_gives_maps_that_sum_to_one(name):
    torch.manual_seed(0)
    model = build_model(name, vocab_size=len(ANSWERS), feature_dim=D, question_vocab_size=len(WORDS), **SMALL).eval()
    k = 196 if model.attends_to == "grid" else K
    feats, mask = torch.randn(3, k, D), torch.ones(3, k, dtype=torch.bool)
    mask[2, k - 2:] = False
    with pytest.raises(ValueError, match="needs a question"):
        decode(model, feats, mask, GREEDY, ANSWERS)
    hyps = [h[0] for h in decode(model, feats, mask, GREEDY, ANSWERS, prompt=question(3))]
    for h, m in zip(hyps, mask):
        assert torch.allclose(h.attention.sum(1), torch.ones(2)) and float(h.attention[0, ~m].sum()) == 0.0
        assert h.tokens[0] >= len(SPECIALS)                                   # never a special token as answer
    if name == "vqa-grid":
        assert hyps[0].heads.shape == (2, 1, 2, k)                            # two glimpses, each a head
    # forced scoring of a given answer: the log-prob the greedy answer had
    forced = [h[0] for h in decode(model, feats, mask, DecodeSettings(strategy="forced"), ANSWERS,
                                   [[h.tokens[0], ANSWERS.end] for h in hyps], prompt=question(3))]
    assert np.allclose([f.logprobs[0] for f in forced], [h.logprobs[0] for h in hyps], atol=1e-5)


def test_the_blind_baseline_sees_no_photo():
    torch.manual_seed(0)
    model = build_model("vqa-blind", vocab_size=len(ANSWERS), feature_dim=D, question_vocab_size=len(WORDS), **SMALL).eval()
    mask = torch.ones(2, K, dtype=torch.bool)
    a = decode(model, torch.randn(2, K, D), mask, GREEDY, ANSWERS, prompt=question(2))
    b = decode(model, torch.randn(2, K, D) * 10, mask, GREEDY, ANSWERS, prompt=question(2))
    for x, y in zip(a, b):
        assert torch.equal(x[0].top_logprobs, y[0].top_logprobs)


def test_a_captioner_takes_no_question():
    model = build_model("updown", vocab_size=len(ANSWERS), feature_dim=D, embed_dim=8, hidden_dim=16, att_dim=8)
    with pytest.raises(ValueError, match="takes no question"):
        decode(model, torch.randn(1, K, D), torch.ones(1, K, dtype=torch.bool), GREEDY, ANSWERS, prompt=question(1))


def test_asking_a_photo_gives_an_answer_trace_that_round_trips(tmp_path, vision):
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    photo = load_photo(os.path.join(ASSETS, "coffee.jpg"))
    from viewer.engine.vision import model_inputs
    dim = model_inputs(vision.extract([photo]), "regions")[0].shape[-1]
    torch.manual_seed(0)
    hparams = {"vocab_size": len(ANSWERS), "feature_dim": dim, "question_vocab_size": len(WORDS), **SMALL}
    model = build_model("vqa-regions", **hparams)
    checkpoints.save(str(tmp_path / "asker.safetensors"), model, ANSWERS, "asker", "vqa-regions", hparams,
                     {"task": "answer", "question_vocab": WORDS.words})
    captioner = Captioner("cpu", checkpoint_dir=str(tmp_path))
    trace = captioner.ask([photo], "asker", ["what is there?"])[0]
    assert trace.question == "what is there?" and len(trace.words) == 1 and trace.words[0] in ANSWERS.words[4:]
    assert abs(float(trace.steps[0].attention.sum()) - 1) < 1e-5 and len(trace.steps[0].attention) == len(trace.region_labels)
    back = AttentionTrace.from_json(json.loads(json.dumps(trace.to_json())))
    assert back.question == trace.question and back.words == trace.words
    assert np.allclose(back.steps[0].attention, trace.steps[0].attention, atol=1e-5)
    with pytest.raises(ValueError, match="answers questions"):
        captioner.caption([photo], "asker")
    with pytest.raises(ValueError, match="type a question"):
        captioner.ask([photo], "asker", ["?!"])
