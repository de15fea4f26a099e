"""Region (or grid) features a user computed elsewhere, looked up by image id.

Imported Up-Down models were trained on Visual Genome Faster R-CNN features, which this project
cannot compute offline; with these readers they run on the images whose features you have:
- the original bottom-up-attention TSV (image_id, image_w, image_h, num_boxes, base64 boxes/features),
- ruotianluo's folders: `<name>_att/<id>.npz` ('feat') with boxes in `<name>_box/<id>.npy` (pixels),
- MILVLG bottom-up-attention.pytorch: `<id>.npz` with 'x', 'bbox', 'image_w', 'image_h',
- poojahira's HDF5 (`image_features`, `spatial_features` whose first four columns are the
  normalised box) with its `*imgid2idx.pkl` index (read with the restricted unpickler),
- grid features: `<id>.npy` / `<id>.npz` of shape (196, D) or (14, 14, D).
A photo's id is its file name without extension, or failing that the number at its end
(`COCO_val2014_000000391895.jpg` -> 391895).
"""
from __future__ import annotations

import base64
import csv
import glob
import os
import re
import sys

import numpy as np
import torch

from ..images import Photo, grid_side
from . import ImageFeatures
from .boxes import Regions


class FeaturesNotFound(LookupError):
    """No precomputed features for this photo; the message says where we looked."""


def photo_ids(name: str) -> list[str]:
    stem = os.path.splitext(os.path.basename(name))[0]
    ids = [stem]
    number = re.search(r"(\d+)$", stem)
    if number:
        ids += [number.group(1), str(int(number.group(1)))]
    return list(dict.fromkeys(ids))


def _regions(feats: np.ndarray, boxes: np.ndarray, width: float, height: float) -> ImageFeatures:
    feats, boxes = np.asarray(feats), np.asarray(boxes)
    if feats.ndim != 2 or not len(feats) or not np.issubdtype(feats.dtype, np.number) or \
            boxes.shape != (len(feats), 4) or not np.issubdtype(boxes.dtype, np.number):
        raise FeaturesNotFound(f"region features {list(feats.shape)} and boxes {list(boxes.shape)} do not make "
                               "one box [x1, y1, x2, y2] per feature vector")
    if not (np.isfinite(feats).all() and np.isfinite(boxes).all() and np.isfinite([width, height]).all()
            and width > 0 and height > 0):
        raise FeaturesNotFound("region features, boxes or the image size hold NaN, infinite or non-positive values")
    boxes = np.clip(np.asarray(boxes, np.float32) / np.array([width, height, width, height], np.float32), 0, 1)
    return ImageFeatures(None, Regions(boxes=boxes, labels=[f"region {i + 1}" for i in range(len(boxes))],
                                       scores=np.ones(len(boxes), np.float32), features=np.asarray(feats, np.float32)))


class FeatureFiles:
    """One of the layouts above, opened once; `lookup(photo)` -> ImageFeatures (a grid, or regions with features)."""

    def __init__(self, path: str):
        self.path = path
        if os.path.isdir(path):
            self.kind = "folder"
        elif path.endswith(".tsv"):
            self.kind, self._offsets = "tsv", self._index_tsv(path)
        elif path.endswith((".h5", ".hdf5")):
            self.kind = "hdf5"
            self._open_hdf5(path)
        else:
            raise ValueError(f"{path}: not a features folder, .tsv or .hdf5 file")

    # --- lookup -------------------------------------------------------------------------------
    def lookup(self, photo: Photo) -> ImageFeatures:
        for image_id in photo_ids(photo.name):
            try:
                found = getattr(self, f"_{self.kind}")(image_id, photo)
            except FeaturesNotFound:
                raise
            except Exception as err:   # numpy's, zip's, base64's, csv's many ways of saying "damaged"
                text = str(err).strip().splitlines()
                raise ValueError(f"{self.path}: the features of {image_id} cannot be read ({type(err).__name__}"
                                 f"{': ' + text[0][:200] if text else ''})") from None
            if found is not None:
                return found
        raise FeaturesNotFound(f"no precomputed features for {photo.name or 'this photo'} "
                               f"(looked for id {' / '.join(photo_ids(photo.name)) or '?'} in {self.path})")

    def _folder(self, image_id: str, photo: Photo):
        for ext in (".npz", ".npy"):
            f = os.path.join(self.path, image_id + ext)
            if os.path.isfile(f):
                break
        else:
            return None
        if ext == ".npy":
            return _grid(np.load(f, allow_pickle=False), f)
        with np.load(f, allow_pickle=False) as z:
            if "x" in z and "bbox" in z:                                     # MILVLG
                x = z["x"]
                x = x.T if x.shape[0] != len(z["bbox"]) else x
                return _regions(x, z["bbox"], float(z["image_w"]), float(z["image_h"]))
            if "feat" not in z and "z" not in z:
                raise FeaturesNotFound(f"{f}: an .npz with neither 'feat' (ruotianluo) nor 'x' and 'bbox' (MILVLG)")
            feats = z["feat"] if "feat" in z else z["z"]                     # ruotianluo
        box_file = os.path.join(re.sub(r"_att/?$", "_box", self.path.rstrip("/")), image_id + ".npy")
        if os.path.isfile(box_file) and feats.ndim == 2:
            return _regions(feats, np.load(box_file, allow_pickle=False), photo.width, photo.height)
        return _grid(feats, f)

    @staticmethod
    def _index_tsv(path: str) -> dict[str, int]:
        offsets, pos = {}, 0
        with open(path, "rb") as f:
            for line in f:
                offsets[line.split(b"\t", 1)[0].decode()] = pos
                pos += len(line)
        return offsets

    def _tsv(self, image_id: str, photo: Photo):
        if image_id not in self._offsets:
            return None
        csv.field_size_limit(sys.maxsize)
        with open(self.path, newline="") as f:
            f.seek(self._offsets[image_id])
            row = next(csv.reader(f, delimiter="\t"))
        _, w, h, n = row[:4]
        boxes = np.frombuffer(base64.b64decode(row[4]), np.float32).reshape(int(n), 4)
        feats = np.frombuffer(base64.b64decode(row[5]), np.float32).reshape(int(n), -1)
        return _regions(feats, boxes, float(w), float(h))

    def _open_hdf5(self, path: str):
        import h5py

        from ..safe_pickle import load as safe_load
        stem = os.path.splitext(path)[0]
        index = glob.glob(stem + "*imgid2idx.pkl") or glob.glob(os.path.join(os.path.dirname(path), "*imgid2idx.pkl"))
        if len(index) != 1:
            raise ValueError(f"{path}: needs its one image-id index next to it ({os.path.basename(stem)}_imgid2idx.pkl)"
                             + (f"; found several: {', '.join(sorted(index))}" if index else ""))
        ids = safe_load(index[0])
        if not isinstance(ids, dict):
            raise ValueError(f"{index[0]}: not a dict of image id -> row")
        self._index = {str(k): int(v) for k, v in ids.items()}
        try:
            self._h5 = h5py.File(path, "r")
        except OSError as err:
            raise ValueError(f"{path}: not a readable HDF5 file ({err})") from None
        missing = {"image_features", "spatial_features"} - set(self._h5)
        if missing:
            raise ValueError(f"{path}: no {', '.join(sorted(missing))} dataset (poojahira's layout has both)")

    def _hdf5(self, image_id: str, photo: Photo):
        if image_id not in self._index:
            return None
        i = self._index[image_id]
        feats, spatial = self._h5["image_features"][i], self._h5["spatial_features"][i]
        return _regions(feats, spatial[:, :4], 1.0, 1.0)


def _grid(a: np.ndarray, source: str) -> ImageFeatures:
    """(side, side, D) or (side * side, D) -> (cells, D); anything else is not a grid."""
    if a.ndim not in (2, 3) or not np.issubdtype(a.dtype, np.number) or a.size == 0:
        raise FeaturesNotFound(f"{source}: holds a {a.dtype} array of shape {list(a.shape)}, not a grid of feature "
                               "vectors (side x side x D or cells x D)")
    a = np.asarray(a, np.float32)
    if not np.isfinite(a).all():
        raise FeaturesNotFound(f"{source}: the features hold NaN or infinite values")
    a = a.reshape(-1, a.shape[-1])
    try:
        grid_side(len(a))
    except ValueError:
        raise FeaturesNotFound(f"{source}: {len(a)} feature vectors are not a square grid, and there is no box "
                               "file that would make them regions") from None
    return ImageFeatures(torch.from_numpy(a))
