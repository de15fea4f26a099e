"""Faithfulness (does a word depend on where the model looked?) on a constructed model with a
known answer, the block's statistics, and the CLI's per-step drops."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from viewer.engine.vocab import SPECIALS, Vocabulary
from viewer.analysis.faithfulness import LEVELS, faithfulness_block, measure, top_half
from viewer.analysis.grounding import bootstrap_ci
from viewer.engine.models.base import CaptionModel, Step, masked_mean

from conftest import ASSETS, ROOT

VOCAB = Vocabulary(SPECIALS + ["a", "dog"])
DOG_CELL, K = 37, 196


class OneCellModel(CaptionModel):
    """Attends (almost) only to DOG_CELL, and says "dog" in proportion to feature 0 of what it
    attends: hiding that cell must cost "dog" dearly, hiding random cells almost nothing. With
    `through_mean`, "dog" comes instead from the mean feature its initial state sees."""

    def __init__(self, through_mean: bool = False):
        super().__init__()
        self.through_mean = through_mean

    def init_state(self, feats, mask, seed=None):
        return {"feats": feats, "mask": mask, "mean": masked_mean(feats, mask)[:, :1] * K}

    def forward_step(self, state, words):
        scores = torch.zeros(state["mask"].shape, dtype=torch.float32, device=words.device)
        scores[:, DOG_CELL] = 8.0
        alpha = torch.softmax(scores.masked_fill(~state["mask"], float("-inf")), -1)
        z = torch.bmm(alpha.unsqueeze(1), state["feats"]).squeeze(1)
        logits = torch.zeros(len(words), len(VOCAB))
        logits[:, VOCAB.index["dog"]] = 12.0 * (state["mean"][:, 0] if self.through_mean else z[:, 0])
        logits[:, VOCAB.index["a"]] = 4.0
        return Step(logits, alpha), state


def _inputs():
    feats = torch.zeros(1, K, 4)
    feats[0, DOG_CELL, 0] = 1.0
    return feats, torch.ones(1, K, dtype=torch.bool)


def test_a_word_that_depends_on_one_cell_drops_when_it_is_hidden_and_not_when_random_cells_are():
    model, (feats, mask) = OneCellModel(), _inputs()
    ids = [VOCAB.index["a"], VOCAB.index["dog"], VOCAB.end]
    with torch.no_grad():
        alpha = model.forward_step(model.init_state(feats, mask), torch.zeros(1, dtype=torch.long))[0].attention
    attention = alpha.repeat(len(ids), 1).numpy()
    words = measure(model, VOCAB, feats, mask, [(0, ids)], [attention], draws=5)
    assert [(w.step, w.word) for w in words] == [(1, "dog")]          # only the word that names a COCO class
    w = words[0]
    assert w.hidden == 1                                                 # the cell alone holds > half the mass
    assert w.drop_top > 3.0 and abs(w.drop_random) < 0.1
    assert w.curve_top[0] == 0.0 and w.curve_random[0] == 0.0           # hiding nothing changes nothing
    assert w.curve_top[1] > 3.0 and min(w.curve_top) >= 0
    assert w.curve_random[-1] < w.curve_top[-1]
    block = faithfulness_block(words)
    assert block["words"] == 1 and block["drop_top"] == round(w.drop_top, 4) and block["halved"] == 1.0
    assert block["curve_levels"] == list(LEVELS) and len(block["curve_top"]) == len(LEVELS)


def test_random_sets_have_the_top_sets_size_and_the_curve_hides_its_share_of_the_units(monkeypatch):
    """What is hidden: the top half (here 2 cells), `draws` random sets of as many distinct unmasked
    cells, and at each level of the curve round(level x units) cells, most attended first and random."""
    import viewer.analysis.faithfulness as faithfulness
    seen = []
    real = faithfulness.forced_logprobs
    monkeypatch.setattr(faithfulness, "forced_logprobs", lambda *a, **kw: (seen.extend(a[5]), real(*a, **kw))[1])
    model, (feats, mask) = OneCellModel(), _inputs()
    mask[0, 150:] = False                                       # 150 units the model may see
    ids = [VOCAB.index["dog"], VOCAB.end]
    attention = np.zeros((2, K))
    attention[:, [5, 9, 20, 40]] = [0.2, 0.2, 0.2, 0.4]        # half the mass: 40, then 5 and 9 (stable order)
    words = measure(model, VOCAB, feats, mask, [(0, ids)], [attention], draws=4, curve_draws=2)
    top = top_half(attention[0, :150])
    assert words[0].hidden == len(top) == 2 and top == [40, 5]
    hidden = [p.hidden for p in seen]
    assert hidden[0] == [] and hidden[1] == [40, 5]             # the word as seen, then its top half
    randoms = hidden[2:6]
    assert all(len(h) == 2 and len(set(h)) == 2 and max(h) < 150 for h in randoms), randoms
    assert len({tuple(h) for h in randoms}) > 1                 # drawn, not one fixed set
    curve = hidden[6:]                                          # level 0 hides nothing: no probe
    sizes = [round(f * 150) for f in LEVELS if f > 0]
    assert [len(h) for h in curve] == [n for n in sizes for _ in range(3)]
    for i, n in enumerate(sizes):
        most, *random_sets = curve[3 * i:3 * i + 3]
        assert most[:4] == [40, 5, 9, 20] and max(most) < 150    # most attended first, never a masked unit
        assert all(len(set(h)) == n and max(h) < 150 for h in random_sets)


def test_a_word_that_comes_through_the_mean_feature_survives_hiding_from_the_attention_only():
    model, (feats, mask) = OneCellModel(through_mean=True), _inputs()
    ids = [VOCAB.index["dog"], VOCAB.end]
    attention = np.full((2, K), 0.1 / (K - 1))
    attention[:, DOG_CELL] = 0.9
    hidden = measure(model, VOCAB, feats, mask, [(0, ids)], [attention], levels=())
    kept = measure(model, VOCAB, feats, mask, [(0, ids)], [attention], levels=(), keep_mean=True)
    assert hidden[0].drop_top > 3.0                 # hidden everywhere: the mean loses the dog too
    assert abs(kept[0].drop_top) < 0.01             # hidden from the attention only: the word stays


def test_top_half_is_the_fewest_units_holding_half_the_mass():
    assert top_half(np.array([0.1, 0.6, 0.3])) == [1]
    assert top_half(np.array([0.3, 0.1, 0.35, 0.25])) == [2, 0]
    assert top_half(np.full(4, 0.25)) == [0, 1]


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_images():
    rng = np.random.default_rng(0)
    few, many = rng.normal(1.0, 1.0, 40), rng.normal(1.0, 1.0, 4000)
    lo, hi = bootstrap_ci(few, np.arange(40))
    assert lo <= few.mean() <= hi
    lo2, hi2 = bootstrap_ci(many, np.arange(4000))
    assert lo2 <= many.mean() <= hi2 and (hi2 - lo2) < (hi - lo) / 5
    # words of one photo move together: 40 photos x 10 equal words are as uncertain as 40 words
    grouped = bootstrap_ci(np.repeat(few, 10), np.repeat(np.arange(40), 10))
    assert np.isclose(grouped[1] - grouped[0], hi - lo, rtol=0.2)


@pytest.mark.parametrize("model", ["sat-soft", "updown"])
def test_cli_adds_the_drops_to_every_step_of_a_forced_caption(model):
    photo = os.path.join(ASSETS, "chelsea.jpg")
    proc = subprocess.run([sys.executable, "-m", "viewer", "caption", photo, "--model", model, "--force",
                           "a cat is sitting on a table", "--json", "--faithfulness"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout)["steps"]
    assert [s["word"] for s in steps][:2] == ["a", "cat"]
    # the very numbers the library gives for that forced caption on that photo (seeded random sets)
    from viewer.analysis.faithfulness import trace_faithfulness
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    captioner, image = Captioner("cpu"), load_photo(photo)
    trace = captioner.force([image], model, ["a cat is sitting on a table"])[0]
    words = trace_faithfulness(captioner, image, model, trace, levels=())
    assert [(s["drop_top"], s["drop_random"]) for s in steps] == [
        (round(w.drop_top, 4), round(w.drop_random, 4)) for w in words]
    assert max(s["drop_top"] for s in steps) > 0.01   # not all zero: hiding the top half costs some word


def test_hiding_at_the_words_step_only_spares_what_came_through_the_earlier_steps_and_says_so():
    ids = [VOCAB.index["dog"], VOCAB.end]
    attention = np.full((2, K), 0.1 / (K - 1))
    attention[:, DOG_CELL] = 0.9
    feats, mask = _inputs()
    by_attention = measure(OneCellModel(), VOCAB, feats, mask, [(0, ids)], [attention], levels=(), step_only=True)
    by_mean = measure(OneCellModel(through_mean=True), VOCAB, feats, mask, [(0, ids)], [attention], levels=(),
                      step_only=True)
    assert by_attention[0].drop_top > 3.0          # the step's own reading loses the dog
    assert abs(by_mean[0].drop_top) < 0.01         # the initial state (the past) still saw it
    assert by_attention[0].hidden_for == "the word's step only"
    whole = measure(OneCellModel(), VOCAB, feats, mask, [(0, ids)], [attention], levels=())
    assert whole[0].hidden_for == "the whole caption"
    block = faithfulness_block(by_attention)
    assert block["hidden_for"] == ["the word's step only"] and "ratio" not in block
    with pytest.raises(ValueError, match="one or the other"):
        measure(OneCellModel(), VOCAB, feats, mask, [(0, ids)], [attention], levels=(), step_only=True, keep_mean=True)


def test_cover_hides_the_units_over_a_hidden_one_with_it():
    """A second copy of the dog (a context region over it, say) keeps the word alive unless it is
    hidden with the dog's cell."""
    feats, mask = _inputs()
    feats[0, 100, 0] = 1.0                           # the dog seen again by unit 100
    ids = [VOCAB.index["dog"], VOCAB.end]
    attention = np.full((2, K), 0.1 / (K - 1))
    attention[:, DOG_CELL] = 0.9

    class TwoPlaces(OneCellModel):   # says "dog" from DOG_CELL, or from unit 100 when that is hidden
        def forward_step(self, state, words):
            step, state = super().forward_step(state, words)
            moved = ~state["mask"][:, DOG_CELL] & state["mask"][:, 100]
            step.logits[moved, VOCAB.index["dog"]] = 12.0
            return step, state

    alone = measure(TwoPlaces(), VOCAB, feats, mask, [(0, ids)], [attention], levels=())
    covered = measure(TwoPlaces(), VOCAB, feats, mask, [(0, ids)], [attention], levels=(), cover=[{DOG_CELL: [100]}])
    assert abs(alone[0].drop_top) < 0.01 and covered[0].drop_top > 3.0
    assert alone[0].hidden_total == 1 and covered[0].hidden_total == 2


def test_context_cover_lists_the_context_regions_overlapping_each_detection():
    from viewer.analysis.faithfulness import context_cover
    from viewer.engine.vision.boxes import CONTEXT, Regions
    boxes = np.array([[0.1, 0.1, 0.3, 0.3], [0.6, 0.1, 0.9, 0.9], *CONTEXT.values()], np.float32)
    labels = ["dog", "person", *CONTEXT]
    cover = context_cover(Regions(boxes, labels, np.ones(len(labels))))
    names = {i: [labels[c] for c in cs] for i, cs in cover.items()}
    assert names == {0: ["whole image", "quarter top left"],
                     1: ["whole image", "quarter top right", "quarter bottom right"]}
