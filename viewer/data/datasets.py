"""Caption dataset readers: Flickr8k folder layout, Karpathy split JSON, COCO captions JSON.

Each reader returns a `CaptionSet`: image paths per split and their reference captions (raw
text; tokenisation happens in `vocab.tokenize`, shared by training and scoring).
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
from dataclasses import dataclass, field


HALVES = ("select", "report")


def half_of(path: str) -> str:
    """Which fixed half of its split a photo is in: the parity of the MD5 of its file name."""
    return HALVES[int(hashlib.md5(os.path.basename(path).encode()).hexdigest(), 16) % 2]


@dataclass
class CaptionSet:
    root: str
    splits: dict[str, list[str]] = field(default_factory=dict)     # split -> image paths
    captions: dict[str, list[str]] = field(default_factory=dict)   # image path -> reference captions
    files: list[str] = field(default_factory=list)                 # what it was read from (captions, split lists)

    def digest(self) -> str:
        """What a record made from this data depends on: its files' bytes (captions and image lists)."""
        h = hashlib.sha256()
        for path in self.files:
            with open(path, "rb") as f:
                h.update(f.read())
        return h.hexdigest()[:16]

    def split(self, name: str) -> list[str]:
        """A split's image paths. "NAME-select" and "NAME-report" are fixed halves of split NAME
        (by a hash of each file name): choose epochs, averages and settings on the select half,
        report on the other, so the reported figures were not tuned on."""
        base, _, half = name.rpartition("-")
        if half in HALVES and base in self.splits and name not in self.splits:
            return [p for p in self.splits[base] if half_of(p) == half]
        if name not in self.splits:
            raise ValueError(f"split {name!r} not found in {self.root}; available: {', '.join(sorted(self.splits)) or 'none'}")
        return self.splits[name]


def load_dataset(path: str) -> CaptionSet:
    """Read a dataset folder or JSON file in any supported layout."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "captions.txt")):
            return read_flickr8k(path)
        found = sorted(glob.glob(os.path.join(path, "dataset_*.json")) + glob.glob(os.path.join(path, "captions_*.json")))
        if found:
            return _read_json(found[0], path)
        raise ValueError(f"{path}: no captions.txt, dataset_*.json or captions_*.json found")
    if path.endswith(".json") and os.path.isfile(path):
        return _read_json(path, os.path.dirname(path))
    raise ValueError(f"{path}: not a dataset folder or JSON file")


def read_flickr8k(root: str) -> CaptionSet:
    """`captions.txt` lines `IMAGE#N<TAB>caption`, `{split}_images.txt`, images in `images/`."""
    data = CaptionSet(root, files=[os.path.join(root, "captions.txt")])
    image_dir = os.path.join(root, "images")
    with open(os.path.join(root, "captions.txt"), encoding="utf-8") as f:
        for line in f:
            if "\t" not in line:
                continue
            key, text = line.rstrip("\n").split("\t", 1)
            data.captions.setdefault(os.path.join(image_dir, key.split("#")[0]), []).append(text)
    for split_file in sorted(glob.glob(os.path.join(root, "*_images.txt"))):
        name = os.path.basename(split_file)[: -len("_images.txt")]
        data.files.append(split_file)
        with open(split_file, encoding="utf-8") as f:
            data.splits[name] = [os.path.join(image_dir, n.strip()) for n in f if n.strip()]
    return data


def _read_json(path: str, root: str) -> CaptionSet:
    """A Karpathy split or COCO captions file; anything else is one clear error, never a traceback."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        karpathy = isinstance(obj, dict) and obj.get("images") and "sentences" in obj["images"][0]
        data = read_karpathy(obj, root) if karpathy else read_coco(obj, root, os.path.basename(path))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        what = "not JSON" if isinstance(err, json.JSONDecodeError) else \
            f"{type(err).__name__}: {err}" if not isinstance(err, KeyError) else f"no {err} field"
        raise ValueError(f"{path}: not a Karpathy split or COCO captions JSON ({what})") from None
    data.files = [path]
    return data


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a {what} that is not text")
    return value


def read_karpathy(obj: dict, root: str) -> CaptionSet:
    """Karpathy split JSON (`dataset_coco.json`, `dataset_flickr8k.json`): images with split and sentences."""
    data = CaptionSet(root)
    for img in obj["images"]:
        path = os.path.join(root, _text(img.get("filepath", ""), "filepath"), _text(img["filename"], "filename"))
        split = {"restval": "train"}.get(img.get("split", "train"), img.get("split", "train"))
        split = "dev" if split == "val" else split
        data.splits.setdefault(split, []).append(path)
        data.captions[path] = [_text(s.get("raw") or " ".join(s["tokens"]), "caption") for s in img["sentences"]]
    return data


def read_coco(obj: dict, root: str, filename: str = "") -> CaptionSet:
    """COCO captions JSON (`captions_train2014.json`): one split named after the file."""
    split = "dev" if "val" in filename else "test" if "test" in filename else "train"
    data = CaptionSet(root)
    by_id = {im["id"]: os.path.join(root, _text(im["file_name"], "file_name")) for im in obj["images"]}
    for ann in obj.get("annotations", []):
        if ann["image_id"] not in by_id:
            raise ValueError(f"a caption of image id {ann['image_id']!r}, which no image has")
        data.captions.setdefault(by_id[ann["image_id"]], []).append(_text(ann["caption"], "caption"))
    data.splits[split] = [p for p in by_id.values() if p in data.captions]
    return data
