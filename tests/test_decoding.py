"""One decoding loop for all models: traces, beams, forced scoring, sampling, branching."""
import numpy as np
import pytest

from viewer.engine.decoding import DecodeSettings
from viewer.engine.images import GRID

from conftest import MODEL_TYPES


@pytest.mark.parametrize("model", MODEL_TYPES)
@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_every_step_has_normalised_attention_of_the_right_shape(captioner, photo, model, strategy):
    traces = captioner.caption([photo], model, DecodeSettings(strategy=strategy, beam_size=3))[0]
    assert len(traces) == (3 if strategy == "beam" else 1)
    for trace in traces:
        assert trace.steps, "a caption with no step"
        for step in trace.steps:
            assert np.isclose(step.attention.sum(), 1.0, atol=1e-5)
            assert (step.attention >= 0).all()
            if model == "updown":
                assert step.attention.shape == (len(trace.region_labels),)
            else:
                assert step.attention.shape == (GRID * GRID,)
                assert (0.0 < step.beta < 1.0) if model.startswith("sat") else step.beta is None
            assert (step.sample is not None) == (model == "sat-hard")
            probs = [p for _, p in step.alternatives]
            assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6
            alternatives = dict(step.alternatives)
            if step.word in alternatives:   # the word's log-prob is the probability shown for it
                assert np.isclose(step.logprob, np.log(alternatives[step.word]), atol=1e-4)
            else:                           # outside the top k shown: no likelier than any of them
                assert step.logprob <= np.log(min(alternatives.values())) + 1e-6


def test_trained_tiny_model_describes_a_training_photo(captioner, photo):
    trace = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="greedy"))[0][0]
    assert "coffee" in trace.words or "cup" in trace.words   # it learned the six photos' captions


@pytest.mark.parametrize("model", MODEL_TYPES)
def test_beam_attention_equals_forced_decoding_of_that_beam(captioner, photo, model):
    compared, unfinished = 0, 0
    for max_len in (20, 3):   # finished beams, and beams cut off by the length limit
        beams = captioner.caption([photo], model, DecodeSettings(strategy="beam", beam_size=3, max_len=max_len))[0]
        assert len(beams) == 3   # too few finished beams are topped up with live ones, so always beam_size
        for beam in beams:
            forced = captioner.force([photo], model, [beam.caption])[0]
            n = len(beam.steps)                  # an unfinished beam has no <end>; forcing adds one
            assert [s.word for s in forced.steps[:n]] == [s.word for s in beam.steps]
            assert len(forced.steps) == n + (0 if beam.finished else 1)
            for a, b in zip(beam.steps, forced.steps):
                assert np.allclose(a.attention, b.attention, atol=1e-5)
                assert np.isclose(a.logprob, b.logprob, atol=1e-4)
                assert a.sample == b.sample
            compared += 1
            unfinished += not beam.finished
    assert compared == 6 and unfinished >= 1   # every beam of both runs, cut-off ones included


def test_beams_are_sorted_and_distinct(captioner, photo):
    beams = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="beam", beam_size=4))[0]
    scores = [b.score for b in beams]
    assert scores == sorted(scores, reverse=True)
    assert len({b.caption for b in beams}) == len(beams)
    assert np.isclose(beams[0].score, sum(s.logprob for s in beams[0].steps), atol=1e-4)


@pytest.mark.parametrize("model", MODEL_TYPES)
def test_greedy_takes_the_most_likely_word_at_every_step(captioner, photo, model):
    trace = captioner.caption([photo], model, DecodeSettings(strategy="greedy", max_len=30))[0][0]
    assert all(s.word == s.alternatives[0][0] for s in trace.steps)
    assert trace.steps[-1].word == "<end>" or len(trace.steps) == 30


def test_beam_size_one_is_greedy(captioner, photo):
    for model in MODEL_TYPES:
        greedy = captioner.caption([photo], model, DecodeSettings(strategy="greedy"))[0][0]
        beam1 = captioner.caption([photo], model, DecodeSettings(strategy="beam", beam_size=1))[0][0]
        assert greedy.words == beam1.words


def test_no_beam_ends_gives_unfinished_beams(captioner, photo):
    beams = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="beam", beam_size=3, max_len=2))[0]
    assert beams and all(len(b.steps) <= 2 for b in beams)
    assert any(not b.finished for b in beams)


def test_length_penalty_divides_by_length(captioner, photo):
    """score == sum of the word log-probs / (number of tokens, <end> included) ** penalty."""
    for penalty in (0.0, 0.5, 1.0):
        beams = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="beam", length_penalty=penalty))[0]
        assert beams
        for b in beams:
            total = sum(s.logprob for s in b.steps)
            assert len(b.steps) > 1 and total < 0   # so each penalty gives a different score
            assert np.isclose(b.score, total / len(b.steps) ** penalty, atol=1e-4)


@pytest.mark.parametrize("model", ["sat-soft", "sat-hard"])
def test_sampling_is_reproducible_with_a_seed(captioner, photo, model):
    run = lambda seed: captioner.caption([photo], model, DecodeSettings(strategy="sample", seed=seed, temperature=1.5))[0][0]
    a, b = run(7), run(7)
    assert a.words == b.words and [s.sample for s in a.steps] == [s.sample for s in b.steps]
    assert any(run(s).words != a.words for s in range(8)), "different seeds never change the sample"


@pytest.mark.parametrize("model", ["sat-soft", "sat-hard"])
def test_a_sample_is_what_forced_decoding_with_its_seed_gives(captioner, photo, model):
    """Each sampled word carries the model's own log-prob of that word (shown among the alternatives,
    which here cover the whole vocabulary), and each hard-attention cell is the one that re-scoring
    the same words with the same seed draws: the sample is reproducible, not just plausible."""
    vocab_size = len(captioner.model(model).vocab.words)
    off_argmax = 0
    for seed in range(3):
        settings = DecodeSettings(strategy="sample", seed=seed, temperature=1.5, top_k=vocab_size)
        trace = captioner.caption([photo], model, settings)[0][0]
        forced = captioner.force([photo], model, [trace.caption], seed=seed)[0]
        assert [s.word for s in forced.steps[:len(trace.steps)]] == [s.word for s in trace.steps]
        for a, b in zip(trace.steps, forced.steps):
            alternatives = dict(a.alternatives)
            assert len(alternatives) == vocab_size and a.word in alternatives
            assert np.isclose(a.logprob, np.log(alternatives[a.word]), atol=1e-4)
            assert np.isclose(a.logprob, b.logprob, atol=1e-4)
            assert (a.sample is None) == (model == "sat-soft") and a.sample == b.sample
            assert np.allclose(a.attention, b.attention, atol=1e-5)
            off_argmax += a.word != a.alternatives[0][0]
    assert off_argmax, "every sampled word was the likeliest: this compared greedy decoding"


def test_hard_attention_samples_depend_on_the_seed_and_follow_alpha():
    """Cells drawn by the seeded counter follow alpha: a chi-square test over many seeds, which a
    draw from the wrong distribution (uniform) fails."""
    import torch
    from scipy.stats import chi2
    from viewer.engine.models import build_model

    torch.manual_seed(0)
    model = build_model("sat-hard", vocab_size=8, feature_dim=6, embed_dim=4, hidden_dim=8, att_dim=4, proj_dim=6,
                        dropout=0.0).eval()
    n, cells = 4000, 16
    feats = (torch.randn(1, cells, 6) * 3).expand(n, cells, 6)
    with torch.no_grad():
        state = model.init_state(feats, torch.ones(n, cells, dtype=torch.bool), torch.arange(n))
        step, _ = model.forward_step(state, torch.zeros(n, dtype=torch.long))
    alpha = step.attention[0].double()
    assert torch.allclose(step.attention, step.attention[:1].expand(n, cells))
    counts = torch.bincount(step.sample, minlength=cells).double()
    limit = chi2.ppf(0.999, cells - 1)
    assert float(((counts - n * alpha) ** 2 / (n * alpha)).sum()) < limit
    assert float(((counts - n / cells) ** 2 / (n / cells)).sum()) > limit   # alpha is far from uniform here


def test_batch_of_photos_equals_one_by_one(captioner, photo):
    from viewer.engine.images import load_photo
    import os
    other = load_photo(os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets", "rocket.jpg"))
    settings = DecodeSettings(strategy="beam", beam_size=2)
    together = captioner.caption([photo, other], "updown", settings)
    alone = [captioner.caption([p], "updown", settings)[0] for p in (photo, other)]
    for t, a in zip(together, alone):
        assert [b.caption for b in t] == [b.caption for b in a]
        assert np.allclose(t[0].steps[0].attention, a[0].steps[0].attention, atol=1e-5)


def test_one_model_call_per_step_for_all_beams_and_images(captioner, photo):
    lm = captioner.model("sat-soft")
    calls = []
    original = lm.model.forward_step

    def counting(state, words):
        calls.append(len(words))
        return original(state, words)

    lm.model.forward_step = counting
    try:
        traces = captioner.caption([photo, photo], "sat-soft", DecodeSettings(strategy="beam", beam_size=3, max_len=6))
    finally:
        del lm.model.forward_step
    assert set(calls) == {6}                                   # 2 images x 3 beams in every call
    assert len(calls) == max(len(b.steps) for ts in traces for b in ts)


def test_branching_continues_from_a_chosen_alternative(captioner, photo):
    first = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="greedy"))[0][0]
    step1 = first.steps[1]
    other_word, other_id = next((w, i) for (w, _), i in zip(step1.alternatives, step1.alternative_ids)
                                if w != step1.word and not w.startswith("<"))
    prefix = [first.steps[0].token, other_id]
    branched = captioner.caption([photo], "sat-soft", DecodeSettings(strategy="greedy"), prefixes=[prefix])[0][0]
    assert branched.words[:2] == [first.steps[0].word, other_word]
    # the forced steps carry the model's real probability of the chosen word
    assert np.isclose(branched.steps[1].logprob, np.log(dict(step1.alternatives)[other_word]), atol=1e-4)
    assert np.allclose(branched.steps[0].attention, first.steps[0].attention, atol=1e-6)


def test_forced_scoring_of_unknown_words_uses_unk(captioner, photo):
    trace = captioner.force([photo], "sat-soft", ["a zzyzx cup"])[0]
    assert [s.word for s in trace.steps] == ["a", "<unk>", "cup", "<end>"]
    assert trace.caption == "a <unk> cup"


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="strategy"):
        DecodeSettings(strategy="nucleus")
    with pytest.raises(ValueError):
        DecodeSettings(beam_size=0)
