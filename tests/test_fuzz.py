"""Bad input, fuzzed (Hypothesis): every loader gives its one clear error or a correct result, never
another exception, and leaves nothing behind.

A few hundred generated cases per loader in `make test` (profile "ci"); `pytest tests/test_fuzz.py
--fuzz` runs thousands (profile "fuzz"). `-p no:cacheprovider` keeps Hypothesis's example database
in memory, so a run writes nothing. Loaders: photos, our checkpoints, hf: folders, the community
formats (pickles, payloads among them), --boxes files, precomputed feature files.
"""
from __future__ import annotations

import copy
import io
import json
import os
import pickle
import shutil
import struct
import tempfile
import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COFFEE = os.path.join(ROOT, "assets", "coffee.jpg")
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.function_scoped_fixture])


def one_line(err: BaseException) -> None:
    """A clear error: a message, on one line, that is not a bare exception name."""
    text = str(err)
    assert text.strip() and "\n" not in text.strip() and "Traceback" not in text, text


def left_behind(before: set[str]) -> set[str]:
    return set(os.listdir(tempfile.gettempdir())) - before


# ------------------------------------------------------------------------------------------ photos

MODES = ["RGB", "L", "P", "LA", "RGBA", "I;16", "I", "F", "1", "CMYK", "YCbCr", "LAB", "HSV", "PA"]
FORMATS = {"PNG": ("RGB", "L", "P", "LA", "RGBA", "I;16", "I", "1", "PA"), "JPEG": ("RGB", "L", "CMYK", "YCbCr"),
           "GIF": ("P", "L"), "BMP": ("RGB", "L", "P", "1"), "TIFF": ("RGB", "L", "CMYK", "F", "I;16", "LAB", "RGBA"),
           "WEBP": ("RGB", "RGBA")}


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height (its data is one empty row: a decompression-bomb shape)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b""))


@st.composite
def photo_bytes(draw) -> bytes:
    kind = draw(st.sampled_from(["encoded", "encoded", "encoded", "claims", "noise"]))
    if kind == "claims":
        return png_claiming(draw(st.integers(1, 2 ** 31 - 1)), draw(st.integers(1, 2 ** 31 - 1)))
    if kind == "noise":
        return draw(st.binary(min_size=0, max_size=300))
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    mode = draw(st.sampled_from(FORMATS[fmt]))
    w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    rgb = np.random.default_rng(draw(st.integers(0, 2 ** 16))).integers(0, 256, (h, w, 3), dtype=np.uint8)
    img = Image.fromarray(rgb).convert(mode) if mode not in ("I;16", "I", "F") else \
        Image.fromarray(rgb[..., 0]).convert("L").convert(mode)
    buf = io.BytesIO()
    kw = {}
    if fmt in ("JPEG", "TIFF", "PNG", "WEBP") and draw(st.booleans()):
        exif = Image.Exif()
        exif[0x0112] = draw(st.integers(0, 9))           # orientation, including values EXIF does not define
        kw["exif"] = exif.tobytes()
    try:
        img.save(buf, fmt, **kw)
    except (OSError, ValueError, KeyError):
        assume(False)                                     # PIL cannot write this mode in this format
    data = buf.getvalue()
    cut = draw(st.sampled_from(["none", "none", "truncate", "flip", "magic"]))
    if cut == "truncate":
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
    elif cut == "flip":
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    elif cut == "magic":
        data = draw(st.binary(min_size=4, max_size=8)) + data[8:]
    return data


@FUZZ
@given(data=photo_bytes())
def test_photos(data):
    from viewer.engine.images import ImageError, load_photo
    before = set(os.listdir(tempfile.gettempdir()))
    try:
        photo = load_photo(data, name="fuzzed")
    except ImageError as err:
        one_line(err)
    else:
        assert photo.rgb.dtype == np.uint8 and photo.rgb.ndim == 3 and photo.rgb.shape[2] == 3
        from viewer.engine.images import DISPLAY_SIDE
        if max(photo.width, photo.height) <= DISPLAY_SIDE:   # (larger ones are kept downscaled for display)
            assert photo.rgb.shape[:2] == (photo.height, photo.width)
        assert 0 < max(photo.rgb.shape[:2]) <= DISPLAY_SIDE
    assert not left_behind(before)


# ------------------------------------------------------------------------------------------ our checkpoints

@pytest.fixture(scope="module")
def our_checkpoint(tmp_path_factory) -> bytes:
    from viewer.engine import checkpoints
    from viewer.engine.models import build_model
    from viewer.engine.vocab import SPECIALS, Vocabulary
    torch.manual_seed(0)
    vocab = Vocabulary(SPECIALS + ["a", "cup", "dog"])
    hparams = {"vocab_size": len(vocab), "feature_dim": 1280, "embed_dim": 8, "hidden_dim": 8, "att_dim": 8,
               "proj_dim": 8, "dropout": 0.0}
    path = str(tmp_path_factory.mktemp("ours") / "m.safetensors")
    checkpoints.save(path, build_model("sat-soft", **hparams), vocab, "m", "sat-soft", hparams)
    return open(path, "rb").read()


def header_of(data: bytes) -> tuple[dict, bytes]:
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def with_header(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                       max_leaves=6)


@st.composite
def checkpoint_edits(draw, data: bytes) -> bytes:
    header, body = header_of(data)
    how = draw(st.sampled_from(["length", "header-bytes", "meta-key", "meta-value", "dtype", "shape", "offsets",
                                "drop-tensor", "body"]))
    names = sorted(k for k in header if k != "__metadata__")
    if how == "length":
        return struct.pack("<Q", draw(st.integers(0, 2 ** 64 - 1))) + data[8:]
    if how == "header-bytes":
        n = struct.unpack("<Q", data[:8])[0]
        i = draw(st.integers(8, 8 + n - 1))
        return data[:i] + draw(st.binary(min_size=1, max_size=4)) + data[i + 1:]
    if how in ("meta-key", "meta-value"):
        meta = json.loads(header["__metadata__"]["viewer"])
        key = draw(st.sampled_from(sorted(meta)))
        if how == "meta-key":
            del meta[key]
        else:
            meta[key] = draw(JSONISH)
        header["__metadata__"]["viewer"] = json.dumps(meta) if draw(st.booleans()) else draw(st.text(max_size=20))
        return with_header(header, body)
    name = draw(st.sampled_from(names))
    if how == "dtype":
        header[name]["dtype"] = draw(st.sampled_from(["F64", "I8", "BOOL", "U8", "F8_E4M3", "X9"]))
    elif how == "shape":
        header[name]["shape"] = draw(st.lists(st.integers(0, 2 ** 40), max_size=4))
    elif how == "offsets":
        header[name]["data_offsets"] = draw(st.lists(st.integers(-5, 2 ** 40), min_size=2, max_size=2))
    elif how == "drop-tensor":
        del header[name]
    else:
        return with_header(header, body[:draw(st.integers(0, len(body)))])
    return with_header(header, body)


@FUZZ
@given(st.data())
def test_our_checkpoints(our_checkpoint, data):
    from viewer.engine import checkpoints
    blob = data.draw(checkpoint_edits(our_checkpoint))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.safetensors")
        open(path, "wb").write(blob)
        try:
            lm = checkpoints.load(path)
        except checkpoints.CheckpointError as err:
            one_line(err)
        else:
            assert lm.vocab.words[:4] == ["<pad>", "<start>", "<end>", "<unk>"]


# ------------------------------------------------------------------------------------------ hf: folders

@pytest.fixture(scope="module")
def hf_template(tmp_path_factory) -> str:
    pytest.importorskip("transformers")
    from test_hf import write_tiny
    return write_tiny(tmp_path_factory.mktemp("hf") / "m")


CONFIG_KEYS = ["model_type", "architectures", "encoder", "decoder", "vision_config", "text_config",
               "decoder_start_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings"]
PART_KEYS = ["model_type", "vocab_size", "n_embd", "n_layer", "n_head", "hidden_size", "num_hidden_layers",
             "num_attention_heads", "image_size", "patch_size", "intermediate_size", "n_positions",
             "add_cross_attention", "position_embedding_type", "bos_token_id", "eos_token_id"]
VALUES = st.one_of(st.sampled_from([None, -1, 0, 1, 2, 3, 7, 10 ** 9, 2 ** 63, 1.5, "", "vit", "gpt2", "bert", "deit",
                                    "blip", [], {}, "relative_key", True]), JSONISH)


@st.composite
def hf_edits(draw):
    edits = []
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["top", "encoder", "decoder"]))
        key = draw(st.sampled_from(CONFIG_KEYS if where == "top" else PART_KEYS))
        edits.append((["config.json"] + ([] if where == "top" else [where]) + [key],
                      "delete" if draw(st.booleans()) else draw(VALUES)))
    files = draw(st.lists(st.sampled_from(["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                           "preprocessor_config.json", "generation_config.json"]), max_size=2, unique=True))
    extra = draw(st.sampled_from([None, "payload.bin", "tensors.bin", "garbage.bin", "index.json", "not-json"]))
    return edits, files, extra


@settings(FUZZ, max_examples=max(100, FUZZ.max_examples // 6))   # each case builds a model: 100 in make test, 500 with --fuzz
@given(edit=hf_edits())
def test_hf_folders(hf_template, edit):
    from viewer.engine.checkpoints import CheckpointError
    from viewer.engine.models.hf import load_folder
    edits, removed, extra = edit
    with tempfile.TemporaryDirectory() as d:
        folder = os.path.join(d, "m")
        shutil.copytree(hf_template, folder)
        marker = os.path.join(d, "ran")
        config = json.load(open(os.path.join(folder, "config.json")))
        for path, value in edits:
            target = config
            for key in path[1:-1]:
                target = target.get(key) if isinstance(target, dict) else None
            if isinstance(target, dict):
                if value == "delete":
                    target.pop(path[-1], None)
                else:
                    target[path[-1]] = copy.deepcopy(value)   # (sampled values are shared objects)
        json.dump(config, open(os.path.join(folder, "config.json"), "w"))
        if extra == "not-json":
            open(os.path.join(folder, "config.json"), "w").write("{not json")
        for name in removed:
            os.remove(os.path.join(folder, name))
        if extra in ("payload.bin", "tensors.bin", "garbage.bin"):
            os.remove(os.path.join(folder, "model.safetensors")) if os.path.exists(os.path.join(folder, "model.safetensors")) else None
            bin_path = os.path.join(folder, "pytorch_model.bin")
            if extra == "payload.bin":
                torch.save({"x": _Payload(marker)}, bin_path)
            elif extra == "tensors.bin":
                torch.save({"x": torch.zeros(2)}, bin_path)
            else:
                open(bin_path, "wb").write(os.urandom(64))
        if extra == "index.json":
            json.dump({"weight_map": {"a": "model-00001-of-00002.safetensors"}},
                      open(os.path.join(folder, "model.safetensors.index.json"), "w"))
            os.remove(os.path.join(folder, "model.safetensors")) if os.path.exists(os.path.join(folder, "model.safetensors")) else None
        try:
            lm = load_folder("hf:" + folder)
        except CheckpointError as err:
            one_line(err)
        else:
            assert lm.vocab.end is not None and lm.image_encoder.side > 0
        assert not os.path.exists(marker)


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# ------------------------------------------------------------------------------------------ community formats

class _Eval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('touch /tmp/viewer-fuzz-ran')",))


PICKLABLE = st.recursive(st.none() | st.integers() | st.floats() | st.text(max_size=6) | st.binary(max_size=6)
                         | st.builds(lambda n: torch.zeros(n), st.integers(0, 3)),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                         max_leaves=8)
KNOWN_KEYS = ["encoder", "decoder", "model", "state_dict", "opt", "vocab", "epoch", "word_map", "infos", "iteration"]


@st.composite
def pickle_files(draw) -> bytes:
    kind = draw(st.sampled_from(["pickle", "known-keys", "payload", "torch", "bytes", "truncated"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "payload":
        obj = {draw(st.sampled_from(KNOWN_KEYS)): draw(st.sampled_from([_Eval(), _Payload("/tmp/viewer-fuzz-ran")]))}
        return pickle.dumps(obj, protocol=draw(st.integers(0, 5)))
    obj = draw(PICKLABLE) if kind != "known-keys" else {k: draw(PICKLABLE) for k in draw(
        st.lists(st.sampled_from(KNOWN_KEYS), min_size=1, max_size=4, unique=True))}
    if kind == "torch":
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()
    data = pickle.dumps(obj, protocol=draw(st.integers(0, 5)))
    return data[:draw(st.integers(0, len(data)))] if kind == "truncated" else data


@FUZZ
@given(blob=pickle_files())
def test_community_formats(blob):
    from viewer.community import import_checkpoint
    if os.path.exists("/tmp/viewer-fuzz-ran"):
        os.remove("/tmp/viewer-fuzz-ran")
    with tempfile.TemporaryDirectory() as d:
        path, out = os.path.join(d, "model.pth"), os.path.join(d, "out")
        open(path, "wb").write(blob)
        try:
            import_checkpoint(path, out)
        except ValueError as err:   # UnsafePickleError, UnreadableFileError, ConversionError
            one_line(err)
            assert not os.path.exists(out + ".safetensors")   # a refused file writes nothing
    assert not os.path.exists("/tmp/viewer-fuzz-ran")


# ------------------------------------------------------------------------------------------ --boxes files

NUMBERS = st.one_of(st.integers(-10, 700), st.floats(allow_nan=True, allow_infinity=True),
                    st.just(10 ** 400), st.just(-(10 ** 400)), st.text(max_size=3), st.none(), st.booleans())


@st.composite
def box_files(draw) -> str:
    photos = {}
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["coffee.jpg", "missing.jpg", "", "../assets/coffee.jpg", "not-a-photo.txt"]))
        boxes = draw(st.dictionaries(st.sampled_from(["cup", "Cup", "saucer", "dog", "", "cups"]),
                                     st.one_of(st.lists(NUMBERS, max_size=5),
                                               st.lists(st.lists(NUMBERS, min_size=4, max_size=4), max_size=3),
                                               st.just([[300, 200, 10, 10]]), st.just([[-50, -50, 5000, 5000]]),
                                               JSONISH), max_size=3))
        entry = {"caption": draw(st.sampled_from(["a cup of coffee on a saucer", "", "!!!", "a dog"])) if draw(
            st.integers(0, 5)) else draw(JSONISH), "boxes": boxes if draw(st.integers(0, 5)) else draw(JSONISH)}
        photos[key] = entry if draw(st.integers(0, 6)) else draw(JSONISH)
    top = photos if draw(st.integers(0, 6)) else draw(JSONISH)
    text = json.dumps(top, allow_nan=True)
    return text if draw(st.integers(0, 8)) else text[:draw(st.integers(0, len(text)))]


@FUZZ
@given(text=box_files())
def test_boxes_files(text):
    from viewer.analysis.user_boxes import BoxFileError, load_box_file
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(COFFEE, os.path.join(d, "coffee.jpg"))
        open(os.path.join(d, "not-a-photo.txt"), "w").write("hello")
        path = os.path.join(d, "boxes.json")
        open(path, "w").write(text)
        try:
            photos = load_box_file(path)
        except BoxFileError as err:
            one_line(err)
        else:
            for p in photos:
                for boxes in p.boxes.values():
                    assert np.isfinite(boxes).all() and (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
                    assert (boxes >= 0).all() and (boxes[:, [0, 2]] <= p.width).all() and (boxes[:, [1, 3]] <= p.height).all()


# ------------------------------------------------------------------------------------------ precomputed features

ARRAYS = st.one_of(
    st.builds(lambda shape, dt: np.ones(shape, dt), st.lists(st.integers(0, 5), max_size=4).map(tuple),
              st.sampled_from([np.float32, np.float64, np.int8, np.bool_, np.uint8])),
    st.builds(lambda n: np.array(["x"] * n), st.integers(0, 3)),
    st.builds(lambda: np.array(float("nan"))), st.builds(lambda: np.zeros((196, 8), np.float32)),
    st.builds(lambda: np.zeros((7, 7, 8), np.float16)))


@st.composite
def feature_folders(draw):
    files = {}
    kind = draw(st.sampled_from(["npy", "npz", "bytes", "tsv"]))
    if kind == "npy":
        files["coffee.npy"] = draw(ARRAYS)
    elif kind == "npz":
        files["coffee.npz"] = draw(st.dictionaries(st.sampled_from(["feat", "z", "x", "bbox", "image_w", "image_h", "other"]),
                                                   ARRAYS, max_size=4))
    elif kind == "bytes":
        files[draw(st.sampled_from(["coffee.npy", "coffee.npz"]))] = draw(st.binary(max_size=120))
    else:
        fields = draw(st.lists(st.text(alphabet="0123456789abcAB=+/-.", max_size=12), min_size=0, max_size=7))
        files["feats.tsv"] = "\t".join(["coffee", *fields]) + "\n"
    box = draw(st.one_of(st.none(), ARRAYS))
    return files, box


@FUZZ
@given(case=feature_folders())
def test_precomputed_feature_files(case):
    from viewer.engine.images import load_photo
    from viewer.engine.vision.precomputed import FeatureFiles, FeaturesNotFound
    files, box = case
    photo = load_photo(COFFEE, name="coffee.jpg")
    with tempfile.TemporaryDirectory() as d:
        att = os.path.join(d, "f_att")
        os.makedirs(att)
        for name, content in files.items():
            target = os.path.join(d if name.endswith(".tsv") else att, name)
            if isinstance(content, bytes):
                open(target, "wb").write(content)
            elif isinstance(content, str):
                open(target, "w").write(content)
            elif isinstance(content, dict):
                np.savez(target, **content)
            else:
                np.save(target, content)
        if box is not None:
            os.makedirs(os.path.join(d, "f_box"))
            np.save(os.path.join(d, "f_box", "coffee.npy"), box)
        source = os.path.join(d, "feats.tsv") if "feats.tsv" in files else att
        try:
            found = FeatureFiles(source).lookup(photo)
        except (ValueError, FeaturesNotFound) as err:
            one_line(err)
        else:
            grid = found.grid if found.regions is None else found.regions.features
            assert grid is not None and len(grid) > 0 and np.isfinite(np.asarray(grid, np.float64)).all()
            if found.regions is not None:
                assert np.isfinite(found.regions.boxes).all() and len(found.regions.boxes) == len(grid)


# ------------------------------------------------------------------------------------------ records and datasets

@st.composite
def record_files(draw) -> bytes:
    """A records file (viewer/batch/records.py): a header, records, then damage of every kind."""
    head = {"fingerprint": {"command": "toy", "chunk": 1}, "items": ["a.jpg", "b.jpg", "c.jpg"]}
    lines = [draw(st.one_of(st.just(head), JSONISH))]
    for _ in range(draw(st.integers(0, 5))):
        record = st.fixed_dictionaries({"index": st.one_of(st.integers(-2, 5), JSONISH),
                                        "id": st.one_of(st.sampled_from(["a.jpg", "b.jpg", "x.jpg"]), JSONISH)},
                                       optional={"error": st.text(max_size=5), "value": JSONISH})
        lines.append(draw(st.one_of(record, record, JSONISH)))
    text = "\n".join(json.dumps(line) for line in lines) + draw(st.sampled_from(["\n", ""]))
    if not draw(st.integers(0, 4)):
        text = text[:draw(st.integers(0, len(text)))]
    return draw(st.binary(max_size=60)) if not draw(st.integers(0, 10)) else text.encode()


@FUZZ
@given(blob=record_files())
def test_records_files(blob):
    from viewer.batch import RecordFile, read_dirs
    fingerprint = {"command": "toy", "chunk": 1}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "records.jsonl")
        open(path, "wb").write(blob)
        for n, read in enumerate((lambda: read_dirs([d])[2], lambda: list(RecordFile(path, fingerprint).done.values()))):
            try:
                records = read()
            except ValueError as err:
                one_line(err)
            else:
                assert all(isinstance(r["index"], int) and r["index"] >= 0 and isinstance(r["id"], str)
                           for r in records)
                opened = open(path, "rb").read()
                assert n == 0 or opened.endswith(b"\n")   # once opened to append, the next record starts a line


@st.composite
def dataset_files(draw) -> tuple[str, str]:
    """A Karpathy split or a COCO captions file, with fields missing, mistyped or cut off."""
    text = st.one_of(st.sampled_from(["a.jpg", "a dog runs", ""]), JSONISH)
    if draw(st.booleans()):
        image = st.fixed_dictionaries({}, optional={"filename": text, "filepath": text, "split": text, "sentences": st.one_of(
            st.lists(st.fixed_dictionaries({}, optional={"raw": text, "tokens": st.one_of(st.lists(text), JSONISH)}),
                     max_size=2), JSONISH)})
        obj = {"images": draw(st.one_of(st.lists(image, min_size=1, max_size=3), JSONISH))}
        name = "dataset_flickr8k.json"
    else:
        image = st.fixed_dictionaries({}, optional={"id": st.one_of(st.integers(0, 2), JSONISH), "file_name": text})
        ann = st.fixed_dictionaries({}, optional={"image_id": st.one_of(st.integers(0, 3), JSONISH), "caption": text})
        obj = {"images": draw(st.one_of(st.lists(image, max_size=3), JSONISH)),
               "annotations": draw(st.one_of(st.lists(ann, max_size=3), JSONISH))}
        name = "captions_val2014.json"
    out = json.dumps(draw(st.one_of(st.just(obj), JSONISH)))
    return name, out if draw(st.integers(0, 6)) else out[:draw(st.integers(0, len(out)))]


@FUZZ
@given(case=dataset_files())
def test_dataset_files(case):
    from viewer.data.datasets import load_dataset
    name, text = case
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, name), "w").write(text)
        for path in (d, os.path.join(d, name)):
            try:
                data = load_dataset(path)
            except ValueError as err:
                one_line(err)
            else:
                assert all(isinstance(c, str) for caps in data.captions.values() for c in caps)
                assert all(isinstance(p, str) for paths in data.splits.values() for p in paths)
                assert len(data.digest()) == 16
