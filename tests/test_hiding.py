"""Hiding (occlusion, faithfulness): nothing of a hidden unit reaches any decoder. Its features
replaced by anything else (random values) change no forced log-prob and no attention; hidden at
one step only (`decode(hide=...)`), the steps before are untouched and that step reads nothing of it."""
import numpy as np
import pytest
import torch

from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.images import GRID
from viewer.engine.models import build_model
from viewer.engine.vocab import Vocabulary

VOCAB = Vocabulary.build(["a dog runs on the green grass"], min_freq=1)
FORCED = DecodeSettings(strategy="forced")
DECODERS = {   # small, randomly initialised, through the registry
    "sat-soft": {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16, "proj_dim": 32},
    "sat-hard": {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16, "proj_dim": 32},
    "sat-sgrvinod": {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16},
    "updown": {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16},
    "updown-ruotianluo": {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16},
    "updown-copy": {"embed_dim": 16, "hidden_dim": 32, "att_dim": 16},
    "transformer": {"dim": 32, "layers": 2, "heads": 4},
    "transformer-encoder": {"dim": 32, "layers": 2, "heads": 4, "encoder_layers": 1},
}


def _setup(name: str):
    torch.manual_seed(0)
    model = build_model(name.replace("-encoder", ""), vocab_size=len(VOCAB), feature_dim=16, dropout=0.0,
                        **DECODERS[name]).eval()
    k = GRID * GRID if model.attends_to == "grid" else 9
    feats, mask = torch.randn(2, k, 16), torch.ones(2, k, dtype=torch.bool)
    if model.attends_to == "regions":
        mask[1, 7:] = False                      # padding
    if model.reads_labels:                       # updown-copy: class indices, and words that name them
        feats[..., -1] = torch.randint(0, 4, (2, k)).float()
        model.label_words[1:4] = (torch.rand(3, len(VOCAB)) < 0.3).float()
    prefixes = [VOCAB.encode("a dog runs on the green grass") + [VOCAB.end], VOCAB.encode("the dog runs") + [VOCAB.end]]
    return model, feats, mask, prefixes


def _most_attended(model, feats, mask, prefixes, n: int = 3) -> list[list[int]]:
    """Per image, the n units the model attends most over its forced caption: hiding them matters."""
    plain = [h[0] for h in decode(model, feats, mask, FORCED, VOCAB, prefixes)]
    return [h.attention.sum(0).argsort(descending=True)[:n].tolist() for h in plain]


def _same(a, b):
    assert np.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert torch.allclose(a.attention, b.attention, atol=1e-6)
    assert torch.allclose(a.top_logprobs, b.top_logprobs, atol=1e-5)
    assert a.heads is None or torch.allclose(a.heads, b.heads, atol=1e-6)
    assert a.sample is None or torch.equal(a.sample, b.sample)


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_a_hidden_unit_changes_nothing_whatever_its_features(name):
    model, feats, mask, prefixes = _setup(name)
    hidden = _most_attended(model, feats, mask, prefixes)
    m = mask.clone()
    for i, units in enumerate(hidden):
        m[i, units] = False
    other = feats.clone()
    for i, units in enumerate(hidden):
        other[i, units] = torch.randn(len(units), feats.shape[-1]) * 10
    a = [h[0] for h in decode(model, feats, m, FORCED, VOCAB, prefixes)]
    b = [h[0] for h in decode(model, other, m, FORCED, VOCAB, prefixes)]
    for x, y, units in zip(a, b, hidden):
        _same(x, y)
        assert float(x.attention[:, units].abs().max()) == 0.0
        assert x.heads is None or float(x.heads[..., units].abs().max()) == 0.0
    # and the hiding is real: the same change to seen units does move the words
    c = [h[0] for h in decode(model, other, mask, FORCED, VOCAB, prefixes)]
    plain = [h[0] for h in decode(model, feats, mask, FORCED, VOCAB, prefixes)]
    assert not np.allclose(c[0].logprobs, plain[0].logprobs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_hidden_at_one_step_only_the_earlier_steps_are_untouched_and_that_step_reads_nothing_of_it(name):
    model, feats, mask, prefixes = _setup(name)
    t = 2
    hidden = _most_attended(model, feats, mask, prefixes)
    m = mask.clone()
    for i, units in enumerate(hidden):
        m[i, units] = False
    plain = [h[0] for h in decode(model, feats, mask, FORCED, VOCAB, prefixes)]
    once = [h[0] for h in decode(model, feats, mask, FORCED, VOCAB, prefixes, hide=(t, m))]
    for a, b, units in zip(plain, once, hidden):
        assert np.allclose(a.logprobs[:t], b.logprobs[:t], atol=1e-6) and torch.equal(a.attention[:t], b.attention[:t])
        assert float(b.attention[t, units].abs().max()) == 0.0 and float(a.attention[t, units].max()) > 0
        assert not np.isclose(a.logprobs[t], b.logprobs[t], atol=1e-6)
    # hidden at step 0 only: the decoders whose initial state reads the features (SAT's mean) keep
    # seeing them there, as hiding with `init_mask` does; updown reads its mean at every step, so
    # there it equals hiding for the whole caption; the transformer has no initial state: both
    zero = [h[0] for h in decode(model, feats, mask, FORCED, VOCAB, prefixes, hide=(0, m))]
    kept = [h[0] for h in decode(model, feats, m, FORCED, VOCAB, prefixes, init_mask=mask)]
    every = [h[0] for h in decode(model, feats, m, FORCED, VOCAB, prefixes)]
    for a, b in zip(zero, every if name.startswith("updown") else kept):
        assert np.isclose(a.logprobs[0], b.logprobs[0], atol=1e-5)
        assert torch.allclose(a.attention[0], b.attention[0], atol=1e-6)


def test_hidden_at_one_step_is_refused_with_the_wrong_shape():
    model, feats, mask, prefixes = _setup("sat-soft")
    with pytest.raises(ValueError, match="one mask of"):
        decode(model, feats, mask, FORCED, VOCAB, prefixes, hide=(1, mask[:1]))
