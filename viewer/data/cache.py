"""On-disk feature cache: grid features and detector regions computed once per image.

Files live under `<root>/<SPEC_KEY>/`, one `.npz` per image content (named by a digest of the file's
bytes, so photos that share a name never share features; no pickles), written atomically, so an
interrupted build continues where it stopped and a change of encoder, detector or preprocessing
(a new SPEC_KEY) starts a fresh folder instead of mixing features.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

from ..batch.records import file_digest
from ..engine.images import ImageError, load_photo
from ..paths import CACHE_DIR
from ..engine.vision import SPEC, SPEC_KEY, ImageFeatures, Regions

DEFAULT_ROOT = os.environ.get("VIEWER_CACHE", CACHE_DIR)


class FeatureCache:
    def __init__(self, root: str | None = None):
        self.dir = os.path.abspath(os.path.join(root or DEFAULT_ROOT, SPEC_KEY))
        self._digests: dict[tuple, str] = {}   # (path, size, mtime) -> its bytes' digest: each file read once
        os.makedirs(self.dir, exist_ok=True)
        spec_file = os.path.join(self.dir, "spec.json")
        if not os.path.exists(spec_file):
            with open(spec_file, "w") as f:
                json.dump(SPEC.to_json(), f, indent=1)

    def path(self, image_path: str) -> str:
        """Where a photo's features are: named by a digest of its file's bytes, not its name, so two
        photos called 1.jpg in two folders never share features (OSError: no such photo)."""
        st = os.stat(image_path)
        key = (os.path.abspath(image_path), st.st_size, st.st_mtime_ns)
        if key not in self._digests:
            self._digests[key] = file_digest(image_path)
        return os.path.join(self.dir, self._digests[key] + ".npz")

    def missing(self, image_paths: list[str]) -> list[str]:
        """The photos without features here (an unreadable one too: `build` says why it skips it)."""
        def cached(p: str) -> bool:
            try:
                return os.path.exists(self.path(p))
            except OSError:
                return False
        return [p for p in image_paths if not cached(p)]

    def build(self, image_paths: list[str], vision, batch_size: int = 16, log=None) -> None:
        """Compute and store features for every image not cached yet (progress bar with ETA)."""
        log = log or functools.partial(print, file=sys.stderr)   # stdout stays for results (--json)
        todo = self.missing(image_paths)
        if not todo:
            return
        log(f"feature cache {self.dir}: {len(image_paths) - len(todo)} cached, {len(todo)} to compute")
        start = time.time()
        with tqdm(total=len(todo), unit="img", desc="features", mininterval=5) as bar:
            for i in range(0, len(todo), batch_size):
                chunk, photos = [], []
                for p in todo[i:i + batch_size]:
                    try:
                        photos.append(load_photo(p))
                        chunk.append(p)
                    except ImageError as err:
                        log(f"skipped {err}")
                for p, feats in zip(chunk, vision.extract(photos) if photos else []):
                    self._save(p, feats)
                bar.update(len(todo[i:i + batch_size]))
        if todo:
            log(f"computed {len(todo)} images in {time.time() - start:.0f} s")

    def _save(self, image_path: str, feats: ImageFeatures) -> None:
        final = self.path(image_path)
        tmp = final + ".tmp.npz"
        np.savez(tmp, grid=feats.grid.to(torch.float16).numpy(), boxes=feats.regions.boxes,
                 labels=np.array(feats.regions.labels, dtype="<U32"), scores=feats.regions.scores)
        os.replace(tmp, final)

    def load(self, image_path: str) -> ImageFeatures:
        with np.load(self.path(image_path), allow_pickle=False) as z:
            return ImageFeatures(torch.from_numpy(z["grid"]), self._regions(z))

    def regions(self, image_path: str) -> Regions:
        """The detector's regions alone (the grid is not read)."""
        with np.load(self.path(image_path), allow_pickle=False) as z:
            return self._regions(z)

    @staticmethod
    def _regions(z) -> Regions:
        return Regions(z["boxes"], [str(s) for s in z["labels"]], z["scores"])
