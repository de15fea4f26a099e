"""Grid encoder and region proposer: shapes, determinism, and one preprocessing for training and inference."""
import os

import numpy as np
import pytest
import torch

from viewer.engine.images import GRID, load_photo, squash
from viewer.engine.vision import model_inputs
from viewer.engine.vision.encoder import FEATURE_DIM
from viewer.engine.vision.regions import CONTEXT, MAX_REGIONS, region_features, select_regions

ASSETS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets")


def test_encoder_gives_196_annotation_vectors_and_keeps_imagenet_semantics(vision):
    images = [squash(load_photo(os.path.join(ASSETS, n))) for n in ("coffee.jpg", "chelsea.jpg")]
    grid = vision.encoder(torch.from_numpy(np.stack(images)))
    assert grid.shape == (2, GRID * GRID, FEATURE_DIM)
    logits = vision.encoder.net._fc(grid.mean(1))
    top = logits.argmax(-1).tolist()
    assert top[0] == 967          # ImageNet 'espresso': the dilated network still recognises the photo
    assert 281 <= top[1] <= 285   # one of ImageNet's domestic cats


def test_detector_regions(vision):
    regions = vision.detector.detect(squash(load_photo(os.path.join(ASSETS, "chelsea.jpg"))))
    assert len(regions) <= MAX_REGIONS
    assert "cat" in regions.labels
    assert regions.labels[-len(CONTEXT):] == list(CONTEXT)
    assert ((regions.boxes >= 0) & (regions.boxes <= 1)).all()
    assert (regions.boxes[:, 2] > regions.boxes[:, 0]).all() and (regions.boxes[:, 3] > regions.boxes[:, 1]).all()


@pytest.mark.parametrize("name", ["motorcycle.jpg", "coffee.jpg", "chelsea.jpg", "grace_hopper.jpg"])
def test_detector_boxes_on_the_photo_and_its_squashed_copy_agree_in_grid_coordinates(vision, name):
    """Training photos are squashed squares; uploads keep their aspect (padded): the main objects
    must come back in the same normalised frame either way."""
    from viewer.engine.vision.regions import _iou
    photo = load_photo(os.path.join(ASSETS, name))
    assert photo.width != photo.height
    on_photo, on_squashed = vision.detector.detect(photo.rgb), vision.detector.detect(squash(photo))
    assert on_photo.labels[0] == on_squashed.labels[0] and on_photo.labels[0] not in CONTEXT
    def confident(regions):     # detections, not the fixed context regions (which score 1)
        return {lab for lab, sc in zip(regions.labels, regions.scores) if lab not in CONTEXT and sc >= 0.5}
    both = confident(on_photo) & confident(on_squashed)
    assert on_photo.labels[0] in both, f"the main object is not found confidently in both: {both}"
    for label in both:
        a = on_photo.boxes[np.array(on_photo.labels) == label]
        b = on_squashed.boxes[np.array(on_squashed.labels) == label]
        assert max(_iou(x, y) for x in a for y in b) > 0.6, f"{label} moved between the two inputs"


def test_image_without_detections_still_has_context_regions(vision):
    blank = np.full((224, 224, 3), 128, np.uint8)
    regions = vision.detector.detect(blank)
    assert regions.labels == list(CONTEXT)
    assert np.allclose(regions.boxes[0], [0, 0, 1, 1])


def test_select_regions_thresholds_and_suppresses_duplicates():
    boxes = np.array([[0.1, 0.1, 0.5, 0.5], [0.11, 0.1, 0.5, 0.52], [0.6, 0.6, 0.9, 0.9], [0.2, 0.2, 0.3, 0.3]])
    regions = select_regions(np.array([18, 18, 18, 1]), np.array([0.9, 0.8, 0.7, 0.05]), boxes)
    assert regions.labels[:2] == ["dog", "dog"] and len(regions) == 2 + len(CONTEXT)
    assert np.allclose(regions.boxes[1], boxes[2])


def test_region_features_pool_the_grid_inside_each_box():
    grid = torch.zeros(1, GRID * GRID, 3)
    grid[0, :, 0] = torch.arange(GRID * GRID).float()   # channel 0 = cell index
    grid[0, :GRID * GRID // 2, 1] = 1.0                 # channel 1 = 1 on the top half
    boxes = torch.tensor([[[0, 0, 1, 0.5], [0, 0.5, 1, 1]]])
    feats = region_features(grid, boxes)
    assert feats.shape == (1, 2, 3 + 5)
    assert feats[0, 0, 1] > 0.95 and feats[0, 1, 1] < 0.05
    assert torch.allclose(feats[0, :, 3:7], boxes[0])
    assert torch.allclose(feats[0, :, 7], torch.tensor([0.5, 0.5]))


def test_training_cache_and_live_pipeline_compute_the_same_features(tiny_data, cache_dir, vision):
    from viewer.data.cache import FeatureCache
    from viewer.engine.pipeline import Captioner

    path = os.path.join(tiny_data, "images", "rocket.jpg")
    cache = FeatureCache(cache_dir)
    cache.build([path], vision, log=lambda *a: None)
    cached = cache.load(path)
    captioner = Captioner("cpu")
    captioner._vision = vision
    live = captioner.features([load_photo(path)])[0]
    assert torch.allclose(cached.grid.float(), live.grid.float(), atol=2e-2)   # cache stores fp16
    assert cached.regions.labels == live.regions.labels
    assert np.allclose(cached.regions.boxes, live.regions.boxes)


def test_model_inputs_pad_regions_with_a_mask(vision):
    photos = [load_photo(os.path.join(ASSETS, n)) for n in ("coffee.jpg", "rocket.jpg")]
    items = vision.extract(photos)
    feats, mask = model_inputs(items, "regions")
    assert feats.shape[:2] == mask.shape
    assert mask.sum(1).tolist() == [len(it.regions) for it in items]
    feats, mask = model_inputs(items, "grid")
    assert feats.shape == (2, GRID * GRID, FEATURE_DIM) and mask.all()
