"""The Transformer captioner: cached incremental decoding, every head recorded, shown and scored."""
import copy

import numpy as np
import pytest
import torch

from viewer.app import session as S
from viewer.engine.decoding import DecodeSettings
from viewer.engine.models import build_model
from viewer.engine.models.base import reorder
from viewer.engine.render import render_heatmap
from viewer.engine.trace import AttentionTrace


@pytest.mark.parametrize("encoder_layers", [0, 1])
def test_incremental_decoding_equals_full_recomputation(encoder_layers):
    torch.manual_seed(0)
    model = build_model("transformer", vocab_size=40, feature_dim=24, dim=32, layers=2, heads=4,
                        encoder_layers=encoder_layers).eval()
    feats, mask = torch.randn(2, 196, 24), torch.ones(2, 196, dtype=torch.bool)
    tokens, image_index = torch.randint(4, 40, (3, 9)), torch.tensor([0, 1, 1])
    with torch.no_grad():
        logits, steps = model.teacher_forced(feats, mask, tokens, image_index)
        state = reorder(model.init_state(feats, mask), image_index)
        for t in range(tokens.shape[1] - 1):
            step, state = model.forward_step(state, tokens[:, t])
            assert torch.allclose(step.logits, logits[t], atol=1e-5)
            assert torch.allclose(step.heads, steps[t].heads, atol=1e-6)
            assert step.heads.shape == (3, 2, 4, 196)
            assert torch.allclose(step.heads.sum(-1), torch.ones(3, 2, 4), atol=1e-5)   # every head's map sums to 1
            assert torch.allclose(step.attention, step.heads[:, -1].mean(1))              # the stated summary
        assert state["self_k0"].shape[1] == tokens.shape[1] - 1    # one cached key per word so far


def test_beam_heads_equal_forced_heads(captioner, photo):
    beams = captioner.caption([photo], "transformer", DecodeSettings(beam_size=3))[0]
    assert len(beams) == 3
    for beam in beams:
        forced = captioner.force([photo], "transformer", [beam.caption])[0]
        words = [s.word for s in beam.steps]
        assert [s.word for s in forced.steps][:len(words)] == words
        for a, b in zip(beam.steps, forced.steps):
            assert a.heads.shape == b.heads.shape and np.allclose(a.heads, b.heads, rtol=1e-3, atol=1e-5)
            assert np.allclose(a.heads.astype(np.float32).sum(-1), 1.0, atol=1e-3)   # float16: 2^-11 apart


def test_heads_round_trip_through_json(captioner, photo):
    trace = captioner.caption([photo], "transformer", DecodeSettings(strategy="greedy"))[0][0]
    obj = trace.to_json()
    heads = np.asarray(obj["steps"][0]["heads"])
    assert heads.shape == (2, 4, 14, 14)
    # the README's stated summary: "grid" is the mean over the last layer's heads (kept as float16:
    # 3 significant digits, so the mean agrees to about 1e-3 of the largest weight)
    assert np.allclose(np.asarray(obj["steps"][0]["grid"]), heads[-1].mean(0), atol=1e-4)
    back = AttentionTrace.from_json(obj)
    for a, b in zip(trace.steps, back.steps):
        assert np.allclose(a.heads, b.heads, atol=1e-6)


def test_the_app_shows_the_picked_head(studio_transformer, photo):
    studio = studio_transformer
    ex = studio.explore(photo, "transformer", DecodeSettings(strategy="greedy"))
    choices = S.head_choices(ex.trace)
    assert len(choices) == 1 + 2 * 4 and choices[0] == S.MEAN_HEADS
    ex.step = 1
    picked = S.overlay(ex, S.Style(head="layer 2 head 3"))
    heads = ex.trace.steps[1].heads
    assert np.array_equal(picked, render_heatmap(ex.display, heads[1, 2].reshape(14, 14)))
    assert not np.array_equal(picked, S.overlay(ex, S.Style(head="layer 1 head 1")))
    assert np.array_equal(S.overlay(ex, S.Style()), render_heatmap(ex.display, ex.trace.grid(1)))
    panel = S.all_heads(ex, S.Style())
    assert panel.shape[0] > 2 * 60 and panel.shape[1] > 4 * 100
    # one tile per head: changing one head changes the panel inside one tile only
    changed = copy.deepcopy(ex.trace)
    changed.steps[1].heads[1, 2] = np.roll(changed.steps[1].heads[1, 2], 97)
    other = S.all_heads(S.Exploration(ex.photo, ex.model, ex.settings, [changed], step=1, display=ex.display),
                        S.Style())
    rows, cols = np.nonzero(np.abs(panel.astype(int) - other.astype(int)).sum(-1) > 30)
    assert len(rows) and cols.max() - cols.min() < panel.shape[1] / 4 and rows.max() - rows.min() < panel.shape[0] / 2



def test_the_heads_grid_gets_every_words_heads_or_only_the_selected_ones(studio_transformer, photo, monkeypatch):
    ex = studio_transformer.explore(photo, "transformer", DecodeSettings(strategy="greedy"))
    ex.step = 2
    got = S.heads_payload(ex)
    assert (got["layers"], got["heads"], got["side"]) == (2, 4, 14) and sorted(got["steps"], key=int) == \
        [str(t) for t in range(ex.n_steps)]   # few: every word's, so the page's grid follows the word
    for t, maps in got["steps"].items():
        assert np.allclose(S.unpacked(maps), ex.trace.steps[int(t)].heads, atol=1e-5)
    monkeypatch.setattr(S, "HEADS_SENT", 10)   # many (a BLIP trace): the selected word's only
    assert list(S.heads_payload(ex)["steps"]) == ["2"]
    soft = studio_transformer.explore(photo, "sat-soft", DecodeSettings(strategy="greedy"))
    assert S.heads_payload(soft) is None


def test_per_head_grounding(tiny_data, tiny_corpus, tiny_checkpoints):
    from viewer.engine import checkpoints
    from viewer.data.datasets import load_dataset
    from viewer.analysis.evaluate import evaluate_split
    _, cache, _, _ = tiny_corpus
    loaded = checkpoints.load(f"{tiny_checkpoints}/transformer.safetensors")
    metrics, _ = evaluate_split(loaded, load_dataset(tiny_data), "dev", cache, DecodeSettings(beam_size=2),
                                meteor=False, heads=True)
    heads = metrics["grounding"]["heads_forced"]
    assert list(heads)[:2] == ["layer 1 head 1", "layer 1 head 2"] and len(heads) == 8
    assert all(set(h) == {"mass_in_box", "pointing", "pointing_off_centre", "entropy"} for h in heads.values())
    # each head is measured on its own map: the heads of a trained model do not all look alike
    assert len({h["entropy"] for h in heads.values()}) > 1 and len({h["mass_in_box"] for h in heads.values()}) > 1


@pytest.fixture(scope="module")
def studio_transformer(captioner):
    return S.Studio(captioner)
