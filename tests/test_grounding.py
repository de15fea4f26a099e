"""Grounding as a metric (constructed cases with known answers), the attention supervision loss,
its training targets, and hard attention's self-critical cell sampling."""
import numpy as np
import torch

from viewer.analysis.grounding import (Caption, grounding_summary, detector_found, detector_recall, entropy, grid_units, ground_words,
                              grounding_block, inside_fractions, named_classes, word_class)
from viewer.engine.models import build_model
from viewer.engine.models.base import AttentionTargets
from viewer.engine.vision import Regions

LEFT_HALF_DOG = Regions(np.array([[0, 0, 0.5, 1.0], [0, 0, 1, 1]], np.float32), ["dog", "whole image"],
                        np.array([0.9, 1.0], np.float32))


def _grid(mask: np.ndarray) -> np.ndarray:
    return (mask / mask.sum()).ravel()


def test_grid_grounding_numbers_on_known_maps():
    left, right, spread = np.zeros((14, 14)), np.zeros((14, 14)), np.ones((14, 14))
    left[:, :7], right[:, 7:] = 1, 1
    peak_right = spread.copy(); peak_right[3, 12] = 50
    words = ["a", "dog", "dog", "dog", "cat", "<end>"]
    attention = np.stack([_grid(m) for m in (spread, left, spread, peak_right, left, spread)])
    items = ground_words(words, attention, grid_units(196), LEFT_HALF_DOG, size=(224, 224))
    assert [(g.word, g.step) for g in items] == [("dog", 1), ("dog", 2), ("dog", 3), ("cat", 4)]
    assert np.isclose(items[0].inside, 1.0) and items[0].hit
    assert np.isclose(items[1].inside, 0.5) and np.isclose(items[1].area, 0.5)
    assert items[2].inside < 0.5 and not items[2].hit          # the peak is on the right half
    assert items[3].inside is None and items[3].hit is None    # no cat was detected
    entropies = [entropy(_grid(spread)), entropy(_grid(left))]
    block = grounding_summary(items, entropies, [np.log(196)] * 2)
    assert block["object_words"] == 4 and block["detected"] == 3
    assert np.isclose(block["pointing"], round(2 / 3, 4)) and np.isclose(block["box_area"], 0.5)
    assert block["pointing_centre_baseline"] == 1.0                 # the box's right edge is the centre line
    assert block["pointing_off_centre"] is None                     # no word's box misses the centre
    off = ground_words(["dog"], attention[1:2], grid_units(196),
                       Regions(np.array([[0, 0, 0.4, 1.0]], np.float32), ["dog"], np.ones(1, np.float32)), size=(224, 224))
    assert grounding_summary(off, [], [])["pointing_off_centre"] == 1.0   # left-half map, box off the centre
    assert np.isclose(block["mass_in_box"], round((1.0 + 0.5 + items[2].inside) / 3, 4))
    assert np.isclose(block["entropy_uniform"], round(np.log(196), 4))
    assert np.isclose(block["entropy"], round((np.log(196) + np.log(98)) / 2, 4))


def test_region_grounding_counts_partial_overlap_and_points_at_the_top_region():
    units = np.array([[0.5, 0, 1, 1], [0, 0, 0.5, 1], [0, 0, 1, 1]], np.float32)
    regions = Regions(units, ["dog", "person", "whole image"], np.ones(3, np.float32))
    g = ground_words(["dog", "man"], np.array([[0.7, 0.2, 0.1], [0.7, 0.2, 0.1]]), units, regions, size=(224, 224))
    assert np.isclose(g[0].inside, 0.7 + 0.1 * 0.5) and g[0].hit
    assert np.isclose(g[1].inside, 0.2 + 0.1 * 0.5) and not g[1].hit   # its top region is the dog's


def test_baselines_on_the_same_words_have_their_known_answers():
    # a dog on the left half (score 0.6), a person on the right half (0.95: the top detection)
    regions = Regions(np.array([[0, 0, 0.5, 1.0], [0.5, 0, 1, 1], [0, 0, 1, 1]], np.float32),
                      ["dog", "person", "whole image"], np.array([0.6, 0.95, 1.0], np.float32))
    left = np.zeros((14, 14))
    left[:, :7] = 1
    attention = np.stack([_grid(left), _grid(left)])
    drawn = np.array([3 * 14 + 10, 3 * 14 + 2])         # cells drawn by hard attention: right, then left
    dog, man = ground_words(["dog", "man"], attention, grid_units(196), regions, drawn=drawn, image=7, size=(224, 224))
    assert np.isclose(dog.uniform, 0.5) and np.isclose(man.uniform, 0.5)   # uniform over cells: the box's share
    assert dog.hit and not dog.top_detection_hit and not dog.drawn_hit     # the label-blind rule points at the person
    assert not man.hit and man.top_detection_hit and not man.drawn_hit
    assert dog.image == man.image == 7 and dog.heatmap_hit is None
    # region units: uniform over the model's own regions; the heatmap peak is where weights pile up
    units = np.array([[0, 0, 1, 1], [0.75, 0, 1, 0.25], [0.75, 0, 1, 0.25]], np.float32)
    boxes = Regions(np.array([[0.625, 0, 1, 0.375]], np.float32), ["dog"], np.ones(1, np.float32))
    (g,) = ground_words(["dog"], np.array([[0.5, 0.25, 0.25]]), units, boxes, heatmap=True, size=(224, 224))
    assert not g.hit and g.heatmap_hit                   # top unit: the whole image; summed peak: the dog
    assert np.isclose(g.uniform, (0.375 ** 2 + 1 + 1) / 3)
    block = grounding_block([Caption(0, ["dog", "man"], attention, grid_units(196), regions, (224, 224), drawn)])
    assert block["pointing"] == 0.5 and block["pointing_top_detection_baseline"] == 0.5
    assert block["pointing_drawn_cell"] == 0.0 and block["mass_uniform_baseline"] == 0.5
    assert block["pointing_ci"] == [0.5, 0.5]            # one photo: nothing to resample


def test_adjectives_of_sports_do_not_name_a_ball():
    assert [word_class(w) for w in "a soccer player kicks the football ball".split()] == \
        [None, None, "person", None, None, None, "sports ball"]


def test_detector_recall_counts_classes_named_by_two_references():
    refs = [["A dog runs", "two dogs play", "a man walks"], ["a cat sleeps", "a kitten", "a bird"]]
    found = [LEFT_HALF_DOG, Regions(np.zeros((1, 4), np.float32), ["whole image"], np.ones(1, np.float32))]
    assert named_classes(refs[0]) == {"dog"} and named_classes(refs[1]) == {"cat"}
    per_photo = [detector_found(r, f) for r, f in zip(refs, found)]
    assert per_photo == [[True], [False]] and detector_recall(per_photo[0] + per_photo[1]) == 0.5


def test_inside_fractions_of_cells_straddling_a_box_edge():
    frac = inside_fractions(grid_units(4), np.array([[0.0, 0.0, 0.75, 0.5]]))
    assert np.allclose(frac, [1, 0.5, 0, 0])


def test_supervision_loss_is_zero_inside_the_box_and_pulls_attention_into_it():
    inside = torch.tensor([[[1.0, 1.0, 0.0, 0.0]]])
    targets = AttentionTargets(inside, torch.tensor([[True]]), weight=1.0)
    assert float(targets.loss(torch.tensor([[[0.3, 0.7, 0.0, 0.0]]]))) == 0.0
    assert np.isclose(float(targets.loss(torch.tensor([[[0.25, 0.25, 0.25, 0.25]]]))), np.log(2))
    unsupervised = AttentionTargets(inside, torch.tensor([[False]]), weight=1.0)
    assert float(unsupervised.loss(torch.tensor([[[0.0, 0.0, 0.5, 0.5]]]))) == 0.0
    logits = torch.zeros(1, 1, 4, requires_grad=True)
    targets.loss(logits.softmax(-1)).backward()
    assert (logits.grad[0, 0, :2] < 0).all() and (logits.grad[0, 0, 2:] > 0).all()   # descent raises the inside


def test_training_targets_follow_the_cached_boxes_of_the_named_class(tiny_corpus):
    from viewer.training.train import GroundingTargets, make_batch

    paths, cache, vocab, encoded = tiny_corpus
    targets = GroundingTargets(paths, cache, "grid", vocab, weight=0.5)
    tokens, image_index, _ = make_batch(paths, encoded, "cpu")
    batch = targets.batch(paths, tokens, image_index, 196)
    assert batch.inside.shape == (tokens.shape[1] - 1, len(tokens), 196) and batch.weight == 0.5
    cat = paths.index(next(p for p in paths if p.endswith("chelsea.jpg")))
    regions = cache.regions(paths[cat])
    assert "cat" in regions.labels, "the detector should find the cat in chelsea.jpg"
    row = int((image_index == cat).nonzero()[0])
    t = [vocab.words[w] for w in tokens[row, 1:].tolist()].index("cat")
    assert batch.valid[t, row]
    boxes = regions.boxes[np.array(regions.labels) == "cat"]
    exact = _covered(grid_units(196), boxes)     # independent of inside_fractions: fine point sampling
    got = batch.inside[t, row].numpy()
    assert (exact > 0).any() and (exact == 0).any()
    assert np.all(got[exact == 1.0] == 1.0)                        # cells wholly in the box count fully
    assert np.all(got[_covered(grid_units(196), boxes + [-1 / 112, -1 / 112, 1 / 112, 1 / 112]) == 0] == 0)
    assert np.abs(got - exact).max() <= 0.13                       # the 1/112 raster's rounding, at the edges
    assert np.isclose(got.mean(), exact.mean(), atol=0.02)         # cells are equal: the mean is the box's area
    assert not batch.valid[0, row]                                   # "a" names nothing
    assert int(batch.valid.sum()) == sum(
        1 for n, j in enumerate(image_index.tolist()) for w in tokens[n, 1:].tolist()
        if targets.token_class.get(w) in set(cache.regions(paths[j]).labels))


def _covered(units: np.ndarray, boxes: np.ndarray, n: int = 40) -> np.ndarray:
    """(K,) the share of each unit's area inside the union of `boxes`, by n x n points per unit."""
    out = []
    for x1, y1, x2, y2 in np.asarray(units, np.float64):
        xs, ys = np.meshgrid(x1 + (np.arange(n) + 0.5) * (x2 - x1) / n, y1 + (np.arange(n) + 0.5) * (y2 - y1) / n)
        hit = np.zeros(xs.shape, bool)
        for b in np.asarray(boxes, np.float64).reshape(-1, 4):
            hit |= (b[0] <= xs) & (xs <= b[2]) & (b[1] <= ys) & (ys <= b[3])
        out.append(hit.mean())
    return np.array(out)


def test_training_targets_for_region_models_are_over_each_photos_regions(tiny_corpus):
    """Region models (Up-Down) are supervised over the photo's own regions: the cat's detection is
    wholly inside the cat's boxes, the whole-image region holds the boxes' area, and the columns past
    a photo's last region (batches pad to the longest region list) stay 0."""
    from viewer.training.train import GroundingTargets, make_batch

    paths, cache, vocab, encoded = tiny_corpus
    targets = GroundingTargets(paths, cache, "regions", vocab, weight=1.0)
    tokens, image_index, _ = make_batch(paths, encoded, "cpu")
    k = max(len(cache.regions(p).labels) for p in paths) + 3
    batch = targets.batch(paths, tokens, image_index, k)
    assert batch.inside.shape == (tokens.shape[1] - 1, len(tokens), k)
    cat = paths.index(next(p for p in paths if p.endswith("chelsea.jpg")))
    regions = cache.regions(paths[cat])
    labels = np.array(regions.labels)
    boxes = regions.boxes[labels == "cat"]
    row = int((image_index == cat).nonzero()[0])
    t = [vocab.words[w] for w in tokens[row, 1:].tolist()].index("cat")
    assert batch.valid[t, row]
    got = batch.inside[t, row].numpy()
    n = len(regions.labels)
    assert np.all(got[n:] == 0)                                     # padding regions weigh nothing
    exact = _covered(regions.boxes, boxes)
    assert np.abs(got[:n] - exact).max() <= 0.05
    assert np.all(got[:n][labels == "cat"] == 1.0)                  # the cat's own detection
    whole = regions.labels.index("whole image")
    assert np.isclose(got[whole], exact[whole], atol=0.02) and 0.05 < got[whole] < 0.95
    # not the grid targets: K is the photo's regions, not 196 cells
    grid = GroundingTargets(paths, cache, "grid", vocab, weight=1.0).batch(paths, tokens, image_index, 196)
    assert grid.inside.shape[-1] == 196 and got[:n].shape != grid.inside[t, row].shape


def test_scst_samples_of_one_image_attend_different_cells():
    from viewer.engine.vocab import Vocabulary
    from viewer.training.scst import scst_loss

    torch.manual_seed(0)
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "dog", "runs"])
    model = build_model("sat-hard", vocab_size=len(vocab), feature_dim=8, embed_dim=4, hidden_dim=8, att_dim=4,
                        proj_dim=8, dropout=0.0)
    cells = []
    original = model.forward_step

    def recording(state, words):
        step, state = original(state, words)
        cells.append(step.sample)
        return step, state

    model.forward_step = recording
    reward = lambda keys, caps: np.zeros(len(caps))   # noqa: E731  (only the draws matter here)
    scst_loss(model, torch.randn(2, 196, 8), torch.ones(2, 196, dtype=torch.bool), ["x", "y"], vocab, reward,
              samples=4, max_len=3)
    first = cells[0].view(2, 4)
    assert all(len(set(row.tolist())) > 1 for row in first), "samples of one image share their cells"


def test_hard_attention_uses_the_expectation_for_about_half_of_the_images():
    torch.manual_seed(0)
    model = build_model("sat-hard", vocab_size=6, feature_dim=8, embed_dim=4, hidden_dim=8, att_dim=4, proj_dim=8,
                        dropout=0.0).train()
    state = model.init_state(torch.randn(400, 196, 8), torch.ones(400, 196, dtype=torch.bool))
    step, _ = model.forward_step(state, torch.ones(400, dtype=torch.long))
    expect = state["expect"]
    assert 150 < int(expect.sum()) < 250
    assert (step.sample_logprob[expect] == 0).all() and (step.sample_logprob[~expect] < 0).all()


def test_forcing_a_sampled_decode_with_its_seeds_replays_its_cells_and_logprobs():
    """SCST's policy gradient follows forcing.forced on the sampled ids: with the samples' seeds it
    must draw the same hard-attention cells and give the same log-probs as the sampling decode."""
    from viewer.engine.decoding import DecodeSettings, decode
    from viewer.engine.forcing import forced
    from viewer.engine.vocab import Vocabulary

    torch.manual_seed(1)
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "dog", "runs", "grass"])
    model = build_model("sat-hard", vocab_size=len(vocab), feature_dim=8, embed_dim=4, hidden_dim=8, att_dim=4,
                        proj_dim=8, dropout=0.0).eval()
    feats, mask = torch.randn(6, 196, 8), torch.ones(6, 196, dtype=torch.bool)
    seeds = torch.arange(100, 106)
    hyps = decode(model, feats, mask, DecodeSettings(strategy="sample", max_len=5, seed=3), vocab, seeds=seeds)
    for i, h in enumerate(hyps):
        tokens = torch.tensor([h[0].tokens])
        out = forced(model, feats[i:i + 1], mask[i:i + 1], tokens, vocab, seeds=seeds[i:i + 1])
        assert torch.allclose(out.logprobs[0], torch.tensor(h[0].logprobs), atol=1e-5)
        assert out.cells is not None and out.cells.shape == tokens.shape
        other = forced(model, feats[i:i + 1], mask[i:i + 1], tokens, vocab, seeds=seeds[i:i + 1] + 1)
        assert not torch.allclose(other.attention, out.attention) or not torch.allclose(other.logprobs, out.logprobs)
    assert len({tuple(h[0].sample.tolist()) for h in hyps}) > 1


def test_the_pointing_tolerance_is_15_px_of_the_photo_whatever_its_size():
    """TorchRay's 15 px are the photo's pixels: a peak 0.1 of the width beside the box is within them
    on a 100-px-wide photo (10 px) and not on a 500-px one (50 px)."""
    box = Regions(np.array([[0.0, 0.0, 0.4, 1.0]], np.float32), ["dog"], np.ones(1, np.float32))
    units = np.array([[0.45, 0.45, 0.55, 0.55]])   # one unit, its centre 0.1 right of the box
    small, = ground_words(["dog"], np.ones((1, 1)), units, box, size=(100, 100))
    large, = ground_words(["dog"], np.ones((1, 1)), units, box, size=(500, 500))
    assert small.hit is False and large.hit is False
    assert small.tolerant_hit is True and large.tolerant_hit is False


def test_plurals_in_ies_and_possessives_name_their_class():
    assert [word_class(w) for w in "puppies babies ladies man's kittens".split()] == \
        ["dog", "person", "person", "person", "cat"]
