"""Per-word maps beyond attention (viewer/analysis/explain.py) and their pixel-space faithfulness
(viewer/analysis/pixel_faithfulness.py), on constructed models with a cheap stand-in encoder."""
from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn

from viewer.analysis import explain as ex
from viewer.analysis import pixel_faithfulness as pf
from viewer.engine.decoding import DecodeSettings
from viewer.engine.images import GRID, AttendsTo, Photo
from viewer.engine.models.base import CaptionModel, Step, build_model
from viewer.engine.vision import FeatureSource, ImageFeatures
from viewer.engine.vocab import SPECIALS, Vocabulary

VOCAB = Vocabulary(SPECIALS + ["a", "bright", "thing", "here"])
SEEN = [(r, c) for r in range(2, 5) for c in range(9, 12)]   # the only cells the toy model can see


def cell_encoder(images: torch.Tensor) -> torch.Tensor:
    """A stand-in for the grid encoder: per 16x16 cell, the pixels' std (texture) and mean -> (N, 196, 2)."""
    x = images.float().mean(-1)                                          # (N, 224, 224)
    cells = x.reshape(len(x), GRID, 16, GRID, 16).permute(0, 1, 3, 2, 4).reshape(len(x), GRID * GRID, 256)
    return torch.stack([cells.std(-1) / 64.0, cells.mean(-1) / 255.0], -1)


class SeesOneRegion(CaptionModel):
    """A 'model' whose word 'bright' depends only on the texture of the SEEN cells."""

    def __init__(self):
        super().__init__()
        self.cells = torch.tensor([r * GRID + c for r, c in SEEN])

    def init_state(self, feats, mask, seed=None):
        return {"a": feats, "mask": mask}

    def forward_step(self, state, words):
        a = state["a"]
        texture = a[:, self.cells, 0].mean(1)
        logits = torch.zeros(len(a), len(VOCAB))
        logits[:, VOCAB.index["bright"]] = 6.0 * texture - 2.0
        att = torch.zeros(len(a), GRID * GRID)
        att[:, self.cells] = 1.0 / len(self.cells)
        return Step(logits, att), state


class FakeCaptioner:
    """What explain.Pipeline needs of a Captioner, around a given decoder and the cell encoder."""

    def __init__(self, model: nn.Module, attends_to=AttendsTo.GRID):
        self.device = torch.device("cpu")
        self.vision = SimpleNamespace(encoder=cell_encoder)
        self.lm = SimpleNamespace(name="toy", model=model.eval(), vocab=VOCAB, attends_to=attends_to, image_encoder=None,
                                  vision_spec=SimpleNamespace(source=FeatureSource.OURS))
        self.grid = None

    def model(self, name):
        return self.lm

    def forced_ids(self, model, caption):
        return VOCAB.encode(caption) + [VOCAB.end]

    def inputs(self, lm, photos):
        from viewer.engine.images import squash
        grid = cell_encoder(torch.from_numpy(squash(photos[0]))[None])[0] if self.grid is None else self.grid
        return [ImageFeatures(grid)]


def textured_photo(seed=0) -> Photo:
    rng = np.random.default_rng(seed)
    rgb = (rng.random((224, 224, 1)) > 0.5).repeat(3, -1).astype(np.uint8) * 255   # sharp noise: blur removes it
    return Photo(rgb, 224, 224, "noise")


def far_from_seen(margin: int) -> np.ndarray:
    r, c = np.mgrid[:GRID, :GRID]
    return (r < 2 - margin) | (r > 4 + margin) | (c < 9 - margin) | (c > 11 + margin)


@pytest.fixture(scope="module")
def toy():
    cap = FakeCaptioner(SeesOneRegion())
    photo = textured_photo()
    pipe = ex.Pipeline(cap, photo, "toy", "a bright thing")
    return cap, photo, pipe


def test_occlusion_finds_the_only_region_seen(toy):
    cap, photo, pipe = toy
    e = ex.explain(cap, photo, "toy", "a bright thing", ("occlusion",), pipe=pipe)
    t = pipe.words.index("bright")
    raw, m = e.raw["occlusion"][t], e.maps["occlusion"][t]
    assert raw.max() > 0.1                                       # hiding what it sees lowers the word
    # a patch it cannot see scores exactly 0 (no window over it touches the seen cells: windows are <= 6 cells)
    assert np.abs(raw[far_from_seen(5)]).max() < 1e-6
    assert m[far_from_seen(5)].sum() < 1e-6
    peak = np.unravel_index(m.argmax(), m.shape)
    assert tuple(int(v) for v in peak) in SEEN
    inside = sum(m[r, c] for r, c in SEEN)
    assert inside > 0.25                                         # 9 of 196 cells (4.6%) hold over a quarter


def test_maps_are_distributions(toy):
    cap, photo, pipe = toy
    e = ex.explain(cap, photo, "toy", "a bright thing", ("attention", "occlusion", "gradcam"), pipe=pipe)
    for method, maps in e.maps.items():
        assert maps.shape == (len(pipe.words), GRID, GRID)
        assert (maps >= 0).all()
        sums = maps.reshape(len(maps), -1).sum(1)
        assert np.allclose(sums[~e.empty[method]], 1, atol=1e-5)
        assert np.allclose(sums[e.empty[method]], 0)
    assert not e.empty["occlusion"][pipe.words.index("bright")]


def test_normalise_clamps_and_marks_empty():
    raw = np.zeros((2, GRID, GRID))
    raw[0, 3, 3], raw[0, 5, 5] = 2.0, -1.0
    raw[1] = -1.0
    maps, empty = ex.normalise(raw)
    assert maps[0, 3, 3] == 1.0 and maps[0, 5, 5] == 0 and empty.tolist() == [False, True]
    assert not maps[1].any()


def small_sat():
    torch.manual_seed(0)
    return build_model("sat-soft", vocab_size=len(VOCAB), feature_dim=16, embed_dim=8, hidden_dim=16,
                       att_dim=8, proj_dim=16, dropout=0.0)


def random_grid_captioner(model):
    cap = FakeCaptioner(model)
    cap.grid = torch.randn(GRID * GRID, 16, generator=torch.Generator().manual_seed(1)).relu()
    return cap


def test_gradcam_matches_direct_autograd():
    cap = random_grid_captioner(small_sat())
    pipe = ex.Pipeline(cap, textured_photo(), "toy", "a bright thing here")
    cam = ex.gradcam_maps(pipe)
    for t in range(pipe.steps):
        a = cap.grid.clone().requires_grad_(True)
        lp = pipe.grid_logprobs(a[None])[0, t]
        (g,) = torch.autograd.grad(lp, a)
        direct = torch.relu(a.detach() @ g.mean(0)).reshape(GRID, GRID).numpy()
        assert np.allclose(cam[t], direct, atol=1e-6, rtol=1e-4), t
        assert direct.max() > 0


def test_deletion_curves(toy):
    cap, photo, pipe = toy
    e = ex.explain(cap, photo, "toy", "a bright thing", ("occlusion",), pipe=pipe)
    d = pf.deletion(pipe, e.maps, random_draws=3)
    t = pipe.words.index("bright")
    assert d.levels[0] == 0
    assert np.allclose(d.morf["occlusion"][:, 0], 0) and np.allclose(d.random[:, 0], 0)
    assert d.morf["occlusion"][t, -1] > 0.1
    assert d.auc("occlusion", "morf")[t] > d.auc()[t] + 0.05          # falls faster than random
    assert d.auc("occlusion", "lerf")[t] < d.auc()[t]                 # and least-relevant-first keeps it
    assert d.gap("occlusion")[t] > 0 and d.gap_name == "blur_gap"    # the blur's gap is not called ROAD
    assert d.visual_dependence[t] > 0.5                               # blurring the photo loses the texture
    assert set(d.summary()) >= {"words", "visual_dependence", "auc_random", "occlusion"}


def test_keep_masks_hide_in_order():
    o = np.arange(GRID * GRID)[None]
    k = pf.keep_masks(o, (0.0, 0.5))
    assert k[0, 0].all() and k[0, 1].ravel()[:98].sum() == 0 and k[0, 1].ravel()[98:].all()
    k = pf.keep_masks(o, (0.5,), least_first=True)
    assert k[0, 0].ravel()[98:].sum() == 0 and k[0, 0].ravel()[:98].all()


def test_randomising_the_decoder_lowers_gradcam_rank_correlation():
    cap = random_grid_captioner(small_sat())
    pipe = ex.Pipeline(cap, textured_photo(), "toy", "a bright thing here")
    before = ex.gradcam_maps(pipe)                                       # the maps before the check
    stages = ex.randomisation_check(cap, None, "toy", "a bright thing here", ("gradcam",), pipe=pipe)
    names = [s.layers for s in stages]
    assert names == [n for n, _ in pipe.model.cascade()]                 # the order the model declares ...
    assert names[0] == "out" and names[-1] == "feat_proj"               # ... from the output down
    last = stages[-1]
    assert last.spearman["gradcam"] is not None and last.spearman["gradcam"] < 0.5   # measured, and low
    assert last.constant["gradcam"] < last.words
    assert pipe.model is cap.lm.model                                    # the loaded model is untouched:
    assert np.allclose(ex.gradcam_maps(pipe), before)                    # its maps are those from before


def test_a_randomisation_that_changes_nothing_is_caught(monkeypatch):
    """The control: if the cascade left the weights as they were, every stage's maps would rank as
    before (rho 1), so the low rho above is the randomisation's doing."""
    from viewer.analysis.explain import sanity
    cap = random_grid_captioner(small_sat())
    monkeypatch.setattr(sanity, "_randomise", lambda part, gen: None)
    stages = ex.randomisation_check(cap, None, "toy", "a bright thing here", ("gradcam",),
                                    pipe=ex.Pipeline(cap, textured_photo(), "toy", "a bright thing here"))
    assert all(s.spearman["gradcam"] > 0.99 and s.constant["gradcam"] == 0 for s in stages)


def test_region_attention_is_spread_over_box_cells():
    boxes = np.array([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 1.0, 1.0]], np.float32)
    g = ex.project_regions(np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]), boxes)
    assert np.allclose(g.sum((1, 2)), 1)
    assert np.allclose(g[0, :7, :7], 1 / 49) and g[0, 7:].sum() == 0
    assert np.allclose(g[1], 1 / 196)


def test_relevancy_on_a_small_transformer():
    torch.manual_seed(0)
    model = build_model("transformer", vocab_size=len(VOCAB), feature_dim=16, dim=16, layers=2, heads=2, dropout=0.0)
    cap = random_grid_captioner(model)
    pipe = ex.Pipeline(cap, textured_photo(), "toy", "a bright thing here")
    rel = ex.relevancy_maps(pipe)
    assert rel.shape == (pipe.steps, GRID, GRID) and (rel >= 0).all() and rel.reshape(pipe.steps, -1).sum(1).min() > 0


def test_relevancy_equals_its_rule_worked_by_hand_on_one_layer():
    """One decoder layer, one head: R_tt = I + Abar_s, so word t's map is
    (Abar_s[t] / sum(Abar_s[t]) + e_t) @ Abar_c, with Abar = (dlogp_t/dA * A)^+ of that word's backward."""
    torch.manual_seed(3)
    model = build_model("transformer", vocab_size=len(VOCAB), feature_dim=16, dim=8, layers=1, heads=1, dropout=0.0)
    cap = random_grid_captioner(model)
    pipe = ex.Pipeline(cap, textured_photo(), "toy", "a bright thing here")
    rel = ex.relevancy_maps(pipe)
    layer = model.layers[0]
    for t in range(pipe.steps):
        kept = {}
        hooks = [layer.self_attn.register_forward_hook(lambda m, a, out: kept.__setitem__("s", out[1])),
                 layer.cross_attn.register_forward_hook(lambda m, a, out: kept.__setitem__("c", out[1]))]
        try:
            with torch.enable_grad():
                lp = pipe.grid_logprobs(pipe.features.grid.float()[None], model=model)[0, t]
                g_s, g_c = torch.autograd.grad(lp, [kept["s"], kept["c"]])
        finally:
            for h in hooks:
                h.remove()
        a_s = (g_s * kept["s"]).clamp(min=0)[0, 0].detach()            # (T, T)
        a_c = (g_c * kept["c"]).clamp(min=0)[0, 0].detach()            # (T, 196)
        row = a_s[t] / a_s[t].sum().clamp_min(1e-12) + torch.eye(pipe.steps)[t]
        assert np.allclose(rel[t].ravel(), (row @ a_c).numpy(), atol=1e-6)


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(__file__), "..", "checkpoints", "sat-soft.safetensors")),
                    reason="shipped checkpoints absent")
def test_shipped_sat_soft_attention_and_gradcam():
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    c = Captioner(device="cpu")
    photo = load_photo(os.path.join(os.path.dirname(__file__), "..", "assets", "chelsea.jpg"))
    caption = "a cat is sitting on a bed"
    trace = c.force([photo], "sat-soft", [caption])[0]
    e = ex.explain(c, photo, "sat-soft", caption, ("attention", "gradcam"))
    assert np.allclose(e.logprobs, [s.logprob for s in trace.steps], atol=1e-4)
    assert np.allclose(e.maps["attention"], ex.attention_grid(trace), atol=1e-5)
    assert e.maps["gradcam"].shape == (len(trace.steps), GRID, GRID)
    pipe = ex.Pipeline(c, photo, "sat-soft", trace.token_ids)          # Grad-CAM is its formula, by autograd:
    grid = pipe.features.grid.float().clone().requires_grad_(True)      # ReLU(sum_k mean_ij(dlogp/dA_k) A_k)
    with torch.enable_grad():
        lp = pipe.grid_logprobs(grid[None])[0]
        for t in (1, 3):
            grad, = torch.autograd.grad(lp[t], grid, retain_graph=True)
            cam = torch.relu((grid.detach() * grad.mean(0)).sum(-1)).reshape(GRID, GRID).numpy()
            want = cam / cam.sum() if cam.sum() > 0 else cam
            assert np.allclose(e.maps["gradcam"][t], want, atol=1e-5)
    assert (e.maps["gradcam"].reshape(len(trace.steps), -1).sum(1) > 0.99).sum() >= len(trace.steps) - 1


@pytest.mark.parametrize("name,hparams", [
    ("sat-soft", {"embed_dim": 8, "hidden_dim": 16, "att_dim": 8, "proj_dim": 16}),
    ("sat-hard", {"embed_dim": 8, "hidden_dim": 16, "att_dim": 8, "proj_dim": 16, "attention": "hard"}),
    ("updown", {"embed_dim": 8, "hidden_dim": 16, "att_dim": 8}),
    ("transformer", {"dim": 16, "layers": 2, "heads": 2, "encoder_layers": 1}),
])
def test_every_weight_is_in_exactly_one_declared_cascade_stage(name, hparams):
    """The randomisation check walks what the model declares: every parameter in one stage, a tied
    weight in the stage nearest the output, and named there."""
    model = build_model(name, vocab_size=len(VOCAB), feature_dim=16, dropout=0.0, **hparams)
    stages = model.cascade()
    seen = [id(p) for _, part in stages for p in ([part] if isinstance(part, nn.Parameter) else part.parameters())]
    assert sorted(seen) == sorted(id(p) for p in model.parameters())     # all of them, none twice
    if name == "transformer":
        assert "tied" in stages[0][0] and any(p is model.embed.weight for p in stages[0][1].parameters())
        assert [n for n, _ in stages][1:3] == ["layers.1", "layers.0"]


def true_map() -> np.ndarray:
    m = np.zeros((1, GRID, GRID))
    for r, c in SEEN:
        m[0, r, c] = 1.0 / len(SEEN)
    return m


@pytest.mark.parametrize("imputer", ["blur", "road"])
def test_each_imputers_morf_falls_fastest_for_the_true_map(toy, imputer):
    """The toy word reads only the SEEN cells: hiding them first (the true map) must cost it more
    than any other order, under the blur and under ROAD's noisy linear imputation alike."""
    cap, photo, pipe = toy
    t = pipe.words.index("bright")
    rng = np.random.default_rng(4)
    maps = np.zeros((pipe.steps, GRID, GRID))
    maps[t] = true_map()[0]
    others = {f"other{i}": np.zeros_like(maps) for i in range(3)}
    for o in others.values():
        o[t] = rng.random((GRID, GRID)) * far_from_seen(0)           # anything but the seen cells first
    d = pf.deletion(pipe, {"true": maps, **others}, steps=[t], imputer=imputer)
    best = d.auc("true", "morf")[t]
    assert best > d.auc()[t] + 0.05 and all(best > d.auc(m, "morf")[t] for m in others)
    assert d.auc("true", "lerf")[t] < 0.05                                # least relevant first keeps the word
    assert d.gap_name == ("road" if imputer == "road" else "blur_gap")


def test_noisy_linear_imputer_equals_pytorch_grad_cams():
    """Our vectorised noisy linear imputation (noise off) is pytorch-grad-cam's NoisyLinearImputer
    (ROAD's reference code) on the same image and mask; the noise has the asked scale."""
    from pytorch_grad_cam.metrics.road import NoisyLinearImputer
    rng = np.random.default_rng(0)
    img = rng.random((3, 40, 48)).astype(np.float32)
    keep = np.ones((40, 48), np.float32)
    keep[5:20, 10:30] = 0
    keep[30:, :8] = 0
    keep[0, 47] = 0
    ref = NoisyLinearImputer(noise=0.0)(torch.from_numpy(img), torch.from_numpy(keep)).numpy()
    ours = ex.noisy_linear(img.transpose(1, 2, 0), keep).transpose(2, 0, 1)
    assert np.abs(ours - ref).max() < 1e-5
    assert np.array_equal(ours[:, keep > 0], img[:, keep > 0])          # kept pixels stay
    noisy = ex.noisy_linear(img.transpose(1, 2, 0), keep, noise=0.1, rng=np.random.default_rng(1)).transpose(2, 0, 1)
    assert 0.08 < float((noisy - ours)[:, keep == 0].std()) < 0.12
    # a hand case: one hidden pixel among kept ones is the weighted mean of its 8 neighbours
    one = np.arange(9, dtype=np.float64).reshape(3, 3, 1)
    k = np.ones((3, 3))
    k[1, 1] = 0
    w = {(0, 0): 1 / 12, (0, 2): 1 / 12, (2, 0): 1 / 12, (2, 2): 1 / 12, (0, 1): 1 / 6, (1, 0): 1 / 6, (1, 2): 1 / 6, (2, 1): 1 / 6}
    assert np.isclose(ex.noisy_linear(one, k)[1, 1, 0], sum(v * one[r, c, 0] for (r, c), v in w.items()))
    everything = ex.noisy_linear(one, np.zeros((3, 3)))                 # nothing kept: the mean colour
    assert np.allclose(everything, one.mean())


def block_photo() -> Photo:
    """Grey, with one low-contrast textured block on the SEEN cells (rows 2-4, columns 9-11): the toy
    word's log-prob is then far from saturation, so every segment's share of it shows."""
    rgb = np.full((224, 224, 3), 128, np.uint8)
    rng = np.random.default_rng(2)
    rgb[32:80, 144:192] = 108 + (rng.random((48, 48, 1)) > 0.5).repeat(3, -1) * 40
    return Photo(rgb, 224, 224, "block")


@pytest.mark.parametrize("method,least", [("superpixels", 0.99), ("kernelshap", 0.7)])
def test_superpixel_maps_put_their_relevance_in_the_segments_the_model_reads(toy, method, least):
    """SLIC segments of the block photo: the ablation's (and KernelSHAP's) relevance lies on the
    segments overlapping the block, exactly 0 elsewhere for the ablation, drawn finely and pooled."""
    cap, _, _ = toy
    photo = block_photo()
    pipe = ex.Pipeline(cap, photo, "toy", "a bright thing")
    e = ex.explain(cap, photo, "toy", "a bright thing", (method,), pipe=pipe)
    t = pipe.words.index("bright")
    seg = ex.segments(pipe)
    inside = np.isin(seg, np.unique(seg[32:80, 144:192]))
    fine = e.fine[method][t]
    assert fine.shape == (ex.FINE_SIDE, ex.FINE_SIDE) and np.isclose(fine.sum(), 1)
    assert fine[inside[::2, ::2]].sum() > least
    assert np.isclose(e.maps[method][t].sum(), 1)
    if method == "superpixels":
        raw = e.raw[method][t]
        assert raw[inside].max() > 0.05 and np.abs(raw[~inside]).max() < 1e-6
        assert e.maps[method][t][far_from_seen(2)].sum() < 1e-6


def test_constant_maps_are_counted_apart_not_as_zero_correlation(monkeypatch):
    """A method whose maps all turn flat once the decoder is randomised has no rank correlation:
    every stage counts its maps as constant and reports no rho, not a rho of 0."""
    flat = np.zeros((GRID, GRID))
    assert ex.sanity.constant(flat) and not ex.sanity.constant(true_map()[0])
    cap = random_grid_captioner(small_sat())
    pipe = ex.Pipeline(cap, textured_photo(), "toy", "a bright thing here")
    before = ex.explain(cap, None, "toy", "a bright thing here", ("gradcam",), pipe=pipe)
    gradcam = ex.REGISTRY["gradcam"]
    monkeypatch.setattr(type(gradcam), "raw", lambda self, p, model=None: np.zeros((p.steps, GRID, GRID)))
    stages = ex.randomisation_check(cap, None, "toy", "a bright thing here", ("gradcam",), explanation=before, pipe=pipe)
    assert all(s.spearman["gradcam"] is None and s.constant["gradcam"] == s.words == pipe.steps for s in stages)


def test_sun_ablation_zeroes_the_top_patches_and_the_true_map_costs_the_word_most(toy):
    """Sun et al.'s ablation on the toy: zeroing the top 20 of 784 patches in the true map's order
    (all inside the seen cells) costs the word far more than a random order; the ablated photos are
    decoded anew (one caption each)."""
    cap, _, _ = toy
    pipe = ex.Pipeline(cap, block_photo(), "toy", "a bright thing")   # far from saturation: a drop shows
    t = pipe.words.index("bright")
    maps = {"true": np.repeat(true_map(), pipe.steps, 0)}
    found = pf.sun_ablation(pipe, maps, [t], DecodeSettings(strategy="greedy", max_len=3))
    assert set(found[t]) == {"true", "random"}
    assert found[t]["true"]["drop"] > found[t]["random"]["drop"] + 0.05
    assert found[t]["random"]["gone"] is False                         # 20 random patches leave the word
    zero = pipe.imputed(pipe.image, pipe.blurred, torch.zeros(1, 28, 28), "zero")
    assert torch.allclose(zero, torch.full_like(zero, 127.5))             # the encoder's normalised 0
    assert len(pipe.captions(torch.ones(2, 28, 28), "zero", DecodeSettings(strategy="greedy", max_len=3))) == 2


DOG_VOCAB = Vocabulary(SPECIALS + ["a", "dog", "here"])
DOG_CELL = 3 * GRID + 10   # the one 16x16 cell (four of Sun's 8x8 patches) the word "dog" depends on


class SaysDogFromOneCell(CaptionModel):
    """'a dog' when the DOG_CELL is textured, else 'a here': its object word depends on one cell."""

    def init_state(self, feats, mask, seed=None):
        return {"a": feats, "mask": mask, "t": torch.zeros(len(feats))}

    def forward_step(self, state, words):
        a, t = state["a"], state["t"]
        logits = torch.full((len(a), len(DOG_VOCAB)), -5.0)
        logits[:, DOG_VOCAB.index["a"]] = torch.where(t == 0, 5.0, -5.0)
        logits[:, DOG_VOCAB.index["dog"]] = torch.where(t == 1, 6.0 * a[:, DOG_CELL, 0] - 2.0, -5.0)
        logits[:, DOG_VOCAB.index["here"]] = torch.where(t == 1, 0.5, -5.0)
        logits[:, DOG_VOCAB.end] = torch.where(t >= 2, 5.0, -5.0)
        att = torch.zeros(len(a), GRID * GRID)
        att[:, DOG_CELL] = 1.0
        return Step(logits, att), {**state, "t": t + 1}


def test_sun_ablation_as_published_removes_the_word_under_the_map_that_ranks_its_patch_first():
    """On the model's own caption ("a dog"), the map that ranks the dog's cell first removes "dog"
    when its top 20 patches are zeroed and the photo decoded anew; a random order does not; the
    unablated photo, decoded through the same path, still says "dog" (the baseline)."""
    from viewer.analysis.explain_eval import sun_own_caption
    from viewer.analysis.explain_reduce import sun_block
    cap = FakeCaptioner(SaysDogFromOneCell())
    cap.lm.vocab = DOG_VOCAB
    cap.forced_ids = lambda model, caption: DOG_VOCAB.encode(caption) + [DOG_VOCAB.end]
    settings = DecodeSettings(strategy="greedy", max_len=4)

    def caption(photos, model, decode_settings):   # the model's own caption, decoded as the pipeline does
        from viewer.engine.decoding import decode
        from viewer.engine.trace import AttentionTrace
        feats = cell_encoder(torch.from_numpy(np.asarray(photos[0].rgb))[None])
        hyp = decode(cap.lm.model, feats, torch.ones(1, GRID * GRID, dtype=torch.bool), settings, DOG_VOCAB)[0][0]
        return [[SimpleNamespace(token_ids=hyp.tokens, caption=" ".join(DOG_VOCAB.decode(hyp.tokens[:-1])))]]
    cap.caption = caption
    found = sun_own_caption(cap, textured_photo(), "toy", ("attention",))
    assert found["caption"] == "a dog" and [w["word"] for w in found["words"]] == ["dog"]
    dog = found["words"][0]
    assert dog["named_unablated"] is True
    assert dog["methods"]["attention"]["gone"] is True and dog["methods"]["random"]["gone"] is False
    assert dog["methods"]["attention"]["drop"] > dog["methods"]["random"]["drop"] + 1.0
    block = sun_block([{"index": 0, "sun": found}], ("attention",))
    assert block["by_method"]["attention"]["gone"] == 1.0 and block["by_method"]["random"]["gone"] == 0.0
    assert block["photos"] == 1 and block["object_words"] == 1
