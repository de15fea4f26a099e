"""Diagnostics on constructed cases whose answers are known."""
import numpy as np
import torch

from viewer.engine import checkpoints
from viewer.engine.vocab import Vocabulary
from viewer.engine.decoding import DecodeSettings
from viewer.analysis.diagnose import cell_at, occlude, sanity
from viewer.analysis.grounding import grounding, grounding_summary, word_class
from viewer.engine.images import GRID, Photo
from viewer.engine.models import build_model
from viewer.engine.pipeline import Captioner, photo_key
from viewer.engine.trace import AttentionTrace, TraceStep
from viewer.engine.vision import ImageFeatures, Regions


def _grid_trace(maps, words, samples=None):
    steps = [TraceStep(w, -1, -0.5, np.asarray(m, np.float32).ravel() / np.sum(m), [(w, 0.6)],
                       sample=None if samples is None else samples[i]) for i, (w, m) in enumerate(zip(words, maps))]
    return AttentionTrace("test", "grid", steps, 200, 100)


def test_word_classes():
    assert word_class("dogs") == "dog" and word_class("puppy") == "dog" and word_class("women") == "person"
    assert word_class("buses") == "bus" and word_class("running") is None


def test_grounding_of_grid_attention_on_known_boxes():
    left = np.zeros((GRID, GRID)); left[:, : GRID // 2] = 1          # attention on the left half
    spread = np.ones((GRID, GRID))
    trace = _grid_trace([spread, left, left, spread], ["a", "dog", "cat", "<end>"])
    regions = Regions(np.array([[0, 0, 0.5, 1.0], [0, 0, 1, 1]], np.float32), ["dog", "whole image"],
                      np.array([0.9, 1.0], np.float32))
    items = grounding(trace, regions)
    assert [(g.word, g.coco_class) for g in items] == [("dog", "dog"), ("cat", "cat")]
    assert np.isclose(items[0].inside, 1.0)
    assert items[1].inside is None                                         # the detector saw no cat
    trace.steps[1].attention = spread.ravel().astype(np.float32) / spread.sum()
    assert np.isclose(grounding(trace, regions)[0].inside, 0.5)
    summary = grounding_summary(items)
    assert (summary["object_words"], summary["detected"]) == (2, 1)
    assert np.isclose(summary["mass_in_box"], 1.0) and np.isclose(summary["mass_uniform_baseline"], 0.5)
    assert summary["pointing"] == 1.0


def test_grounding_of_region_attention():
    boxes = np.array([[0.5, 0, 1, 1], [0, 0, 0.5, 1], [0, 0, 1, 1]], np.float32)
    step = TraceStep("dog", -1, -0.1, np.array([0.7, 0.2, 0.1], np.float32), [])
    trace = AttentionTrace("t", "regions", [step], 100, 100, region_boxes=boxes, region_labels=["dog", "person", "whole image"],
                           region_scores=np.ones(3, np.float32))
    regions = Regions(boxes, ["dog", "person", "whole image"], np.ones(3, np.float32))
    assert np.isclose(grounding(trace, regions)[0].inside, 0.7 + 0.1 * 0.5)


def test_sanity_flags_attention_that_never_moves():
    still = [np.ones((GRID, GRID))] * 4
    moving = [np.eye(GRID)[i % GRID][:, None] * np.ones((1, GRID)) + 1e-6 for i in range(4)]
    assert sanity(_grid_trace(still, list("abcd")))["static"] is True
    report = sanity(_grid_trace(moving, list("abcd")))
    assert report["static"] is False and report["mean_pairwise_similarity"] < 0.1
    assert len(report["entropy"]) == 4 and report["entropy"][0] < report["max_entropy"]


def test_sanity_counts_hard_samples_away_from_argmax():
    peak = np.full((GRID, GRID), 1e-3); peak[0, 0] = 1
    report = sanity(_grid_trace([peak] * 4, list("abcd"), samples=[0, 0, 5, 0]))
    assert report["hard_left_argmax"] == 0.25


def test_cell_under_a_click():
    assert cell_at(0, 0, 640, 480) == 0
    assert cell_at(639, 479, 640, 480) == GRID * GRID - 1
    assert cell_at(320, 0, 640, 480) == GRID // 2


def test_occluding_the_attended_cell_lowers_the_word_probability(tmp_path):
    """A hand-built soft-attention model: the word 'red' is likely only if cell 0's feature is seen."""
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "red", "blue"])
    model = build_model("sat-soft", vocab_size=len(vocab), feature_dim=2, embed_dim=2, hidden_dim=2, att_dim=2,
                        proj_dim=2, dropout=0.0)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.feat_proj[0].weight.copy_(torch.eye(2))       # annotation = feature
        model.out_z.weight.copy_(torch.eye(2))              # logits read the context directly
        model.f_beta.bias.fill_(10.0)
        model.out.weight[4, 0] = 400.0                      # 'red' <- feature 0 (only cell 0 has it)
        model.out.bias[5] = 1.0                             # 'blue' otherwise
        model.out.bias[2] = 0.5
    hparams = {"vocab_size": len(vocab), "feature_dim": 2, "embed_dim": 2, "hidden_dim": 2, "att_dim": 2,
               "proj_dim": 2, "dropout": 0.0, "attention": "soft"}
    checkpoints.save(str(tmp_path / "toy.safetensors"), model, vocab, "toy", "sat-soft", hparams, half=False)
    captioner = Captioner("cpu", checkpoint_dir=str(tmp_path))
    photo = Photo(np.zeros((100, 200, 3), np.uint8), 200, 100, "toy")
    grid = torch.zeros(GRID * GRID, 2)
    grid[0, 0] = 1.0
    captioner._features[photo_key(photo)] = ImageFeatures(grid)     # known features instead of the encoder
    trace = captioner.force([photo], "toy", ["red"])[0]
    greedy = DecodeSettings(strategy="greedy", max_len=3)
    result = occlude(captioner, photo, "toy", trace, step=0, hidden=[0], settings=greedy)
    assert result.word == "red" and result.prob_after < result.prob_before - 0.2
    assert result.new_caption.split()[0] == "blue"
    untouched = occlude(captioner, photo, "toy", trace, step=0, hidden=[GRID * GRID - 1], settings=greedy)
    assert untouched.new_caption.split()[0] == "red"
    assert untouched.prob_after >= untouched.prob_before - 1e-3      # hiding an empty cell changes little
