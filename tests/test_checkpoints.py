"""Our safetensors checkpoint format: round trip, and clear refusals of anything else."""
import json
import os
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from viewer.engine import checkpoints
from viewer.engine.checkpoints import CheckpointError
from viewer.engine.decoding import DecodeSettings
from viewer.engine.pipeline import Captioner

from conftest import MODEL_TYPES


def _rewrite_meta(src, dst, change):
    from safetensors import safe_open
    with safe_open(src, framework="pt") as f:
        meta = json.loads(f.metadata()["viewer"])
    change(meta)
    save_file(load_file(src), dst, metadata={"viewer": json.dumps(meta)})


@pytest.mark.parametrize("model", MODEL_TYPES)
def test_round_trip_gives_identical_traces(tiny_checkpoints, captioner, photo, tmp_path, model):
    loaded = captioner.model(model)
    path = str(tmp_path / "copy.safetensors")
    checkpoints.save(path, loaded.model, loaded.vocab, "copy", loaded.meta["model_type"], loaded.meta["hparams"],
                     half=False)
    again = checkpoints.load(path)
    for (k, v), (k2, v2) in zip(loaded.model.state_dict().items(), again.model.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    settings = DecodeSettings(strategy="beam", beam_size=2)
    a = captioner.caption([photo], model, settings)[0][0]
    b = captioner.caption([photo], path, settings)[0][0]
    assert a.words == b.words
    assert all(np.array_equal(x.attention, y.attention) for x, y in zip(a.steps, b.steps))


def test_metadata_says_what_the_model_is(tiny_checkpoints):
    meta = checkpoints.read_meta(os.path.join(tiny_checkpoints, "sat-soft.safetensors"))
    for key in ("model_type", "hparams", "vocab", "vision_spec", "date", "code_version", "training"):
        assert key in meta
    assert meta["vocab"][:4] == ["<pad>", "<start>", "<end>", "<unk>"]


def test_vision_spec_round_trips_and_keeps_the_stored_form():
    """Ours is stored without a `source` field, an imported one with it; both hash as before the dataclass."""
    from viewer.engine.vision import SPEC, SPEC_KEY, FeatureSource, VisionSpec
    from viewer.engine.vision.carried import resnet_spec
    from viewer.engine.vision.spec import spec_key
    assert "source" not in SPEC.to_json() and SPEC.key == SPEC_KEY == spec_key(SPEC.to_json())
    carried = resnet_spec([3, 4, 23, 3])
    stored = carried.to_json()
    assert stored["source"] == "checkpoint" and stored["layers"] == [3, 4, 23, 3]
    assert VisionSpec.from_json(stored) == carried and carried.brings_own_features and not SPEC.brings_own_features
    assert VisionSpec.from_json(SPEC.to_json()) == SPEC and SPEC.source == FeatureSource.OURS


@pytest.mark.parametrize("field", ["vocab", "model_type", "hparams", "format"])
def test_missing_field_is_refused(tiny_checkpoints, tmp_path, field):
    dst = str(tmp_path / "bad.safetensors")
    _rewrite_meta(os.path.join(tiny_checkpoints, "updown.safetensors"), dst, lambda m: m.pop(field))
    with pytest.raises(CheckpointError, match=field):
        checkpoints.load(dst)


@pytest.mark.parametrize("change, words", [
    (lambda m: m.update(model_type="lstm-of-the-future"), "unknown model type"),
    (lambda m: m.update(vision_spec_key="0123456789ab"), "other image features"),
    (lambda m: m.update(format="someone-else/3"), "format"),
    (lambda m: m["vision_spec"].update(source="webcam"), "unknown feature source 'webcam'"),
    (lambda m: m["vision_spec"].update(source="checkpoint"), "does not match its key"),
    (lambda m: m["hparams"].update(hidden_dim=999), "do not match|cannot rebuild"),
    (lambda m: m["hparams"].update(no_such_option=1), "cannot rebuild"),
])
def test_wrong_field_is_refused(tiny_checkpoints, tmp_path, change, words):
    dst = str(tmp_path / "bad.safetensors")
    _rewrite_meta(os.path.join(tiny_checkpoints, "sat-soft.safetensors"), dst, change)
    with pytest.raises(CheckpointError, match=words):
        checkpoints.load(dst)


def test_pickle_is_never_unpickled(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "model.safetensors"
    path.write_bytes(pickle.dumps({"state_dict": Payload()}))
    with pytest.raises(CheckpointError, match="not a safetensors checkpoint"):
        checkpoints.load(str(path))
    assert not marker.exists()


def test_other_files_are_refused_clearly(tmp_path):
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(CheckpointError, match="without viewer metadata"):
        checkpoints.load(str(plain))
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoints.load(str(tmp_path / "missing.safetensors"))
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(plain.read_bytes()[:20])
    with pytest.raises(CheckpointError):
        checkpoints.load(str(truncated))


def test_unknown_model_name_lists_the_available_ones(tiny_checkpoints):
    with pytest.raises(CheckpointError, match="sat-soft"):
        Captioner("cpu", checkpoint_dir=tiny_checkpoints).model("nonexistent")


@pytest.mark.parametrize("a", [0.0, 0.3, 1.0])
def test_interpolating_a_checkpoint_with_itself_is_that_checkpoint(tiny_checkpoints, tmp_path, a):
    path = os.path.join(tiny_checkpoints, "updown.safetensors")
    mixed = checkpoints.average([path, path], str(tmp_path / "self.safetensors"), weights=[1 - a, a])
    original = checkpoints.load(path).model.state_dict()
    for k, v in mixed.model.state_dict().items():
        torch.testing.assert_close(v.float(), original[k].float(), rtol=1e-6, atol=1e-7)


def test_average_of_checkpoints_is_the_mean_of_their_weights(tiny_checkpoints, tmp_path):
    src = checkpoints.load(os.path.join(tiny_checkpoints, "sat-soft.safetensors"))
    other = str(tmp_path / "nudged.safetensors")
    with torch.no_grad():
        for p in src.model.parameters():
            p.add_(0.5)
    checkpoints.save(other, src.model, src.vocab, "sat-soft", "sat-soft", src.meta["hparams"], half=False)
    soup = checkpoints.average([os.path.join(tiny_checkpoints, "sat-soft.safetensors"), other],
                               str(tmp_path / "soup.safetensors"))
    original = checkpoints.load(os.path.join(tiny_checkpoints, "sat-soft.safetensors")).model.state_dict()
    for k, v in soup.model.state_dict().items():
        if v.is_floating_point() and k != "baseline":
            torch.testing.assert_close(v, original[k].float() + 0.25)
    assert len(soup.meta["averaged_from"]) == 2
    quarter = checkpoints.average([os.path.join(tiny_checkpoints, "sat-soft.safetensors"), other],
                                  str(tmp_path / "wise.safetensors"), weights=[0.75, 0.25])   # WiSE-FT, a = 0.25
    for k, v in quarter.model.state_dict().items():
        if v.is_floating_point() and k != "baseline":
            torch.testing.assert_close(v, original[k].float() + 0.125)
    with pytest.raises(CheckpointError, match="summing to 1"):
        checkpoints.average([os.path.join(tiny_checkpoints, "sat-soft.safetensors"), other],
                            str(tmp_path / "bad.safetensors"), weights=[0.5, 0.6])
    with pytest.raises(CheckpointError, match="cannot average"):
        checkpoints.average([os.path.join(tiny_checkpoints, "sat-soft.safetensors"),
                             os.path.join(tiny_checkpoints, "updown.safetensors")], str(tmp_path / "bad.safetensors"))


def test_models_you_make_are_found_beside_the_shipped_ones(tiny_checkpoints, tmp_path, monkeypatch):
    """As when installed: shipped models in one folder (the package), the ones you import or ship in
    another (./checkpoints); both found by name, the shipped one winning a clash."""
    import shutil
    own = tmp_path / "checkpoints"
    own.mkdir()
    for name in ("mine", "sat-soft"):
        shutil.copy(os.path.join(tiny_checkpoints, "updown.safetensors"), own / f"{name}.safetensors")
    monkeypatch.setattr(checkpoints, "MODEL_DIRS", (tiny_checkpoints, str(own)))
    monkeypatch.setattr(checkpoints, "OWN_CHECKPOINT_DIR", str(own))
    found = checkpoints.available()
    assert found["mine"] == str(own / "mine.safetensors")
    assert found["sat-soft"] == os.path.join(tiny_checkpoints, "sat-soft.safetensors")
    assert checkpoints.resolve("mine") == found["mine"] and checkpoints.load(found["mine"]).attends_to == "regions"
    assert checkpoints.named_path("new") == str(own / "new.safetensors")
    assert checkpoints.named_path("new", str(tmp_path)) == str(tmp_path / "new.safetensors")


def _strings(obj):
    """Every string in a metadata tree (dict keys excluded)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def test_saving_strips_the_machines_absolute_paths(tiny_checkpoints, tmp_path):
    """averaged_from, init_from and the data folder keep base names; relative paths and other text stay."""
    src = os.path.join(tiny_checkpoints, "sat-soft.safetensors")
    lm = checkpoints.load(src)
    extra = {"training": {"data": "/home/someone/data/flickr8k",
                          "config": {"data": "../shared/data/flickr8k", "init_from": "/tmp/soft_e6.safetensors",
                                     "out": "runs/sat-soft"}},
             "averaged_from": ["/work/main/runs/a/last.safetensors", "C:\\runs\\b\\best.safetensors", "runs/c.safetensors"],
             "note": "/not/a/path/key stays"}
    path = str(tmp_path / "saved.safetensors")
    checkpoints.save(path, lm.model, lm.vocab, "x", "sat-soft", lm.meta["hparams"], extra, half=False)
    meta = checkpoints.read_meta(path)
    assert meta["training"]["data"] == "flickr8k"
    assert meta["training"]["config"] == {"data": "../shared/data/flickr8k", "init_from": "soft_e6.safetensors",
                                          "out": "runs/sat-soft"}
    assert meta["averaged_from"] == ["last.safetensors", "best.safetensors", "runs/c.safetensors"]
    assert meta["note"] == "/not/a/path/key stays"
    soup = checkpoints.average([os.path.abspath(src), os.path.abspath(src)], str(tmp_path / "soup.safetensors"))
    assert soup.meta["averaged_from"] == ["sat-soft.safetensors"] * 2


def test_update_meta_rewrites_the_header_and_keeps_every_tensor_bit_for_bit(tiny_checkpoints, tmp_path):
    import shutil
    path = str(tmp_path / "copy.safetensors")
    shutil.copy(os.path.join(tiny_checkpoints, "updown.safetensors"), path)
    before = load_file(path)
    meta = checkpoints.update_meta(path, {"dev_split": "dev-select", "averaged_from": ["/abs/x.safetensors"]})
    assert meta == checkpoints.read_meta(path)
    assert meta["dev_split"] == "dev-select" and meta["averaged_from"] == ["x.safetensors"]
    after = load_file(path)
    assert before.keys() == after.keys()
    assert all(before[k].dtype == after[k].dtype and torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("name", ["sat-soft", "sat-hard", "updown", "transformer"])
def test_every_shipped_checkpoint_says_how_it_was_chosen_and_holds_no_machine_path(name):
    from conftest import ROOT
    meta = checkpoints.read_meta(os.path.join(ROOT, "checkpoints", f"{name}.safetensors"))
    assert meta["dev_split"] == meta["training"]["config"]["dev_split"] == "dev"   # early stopping, before dev-select
    chosen = meta["chosen_on"]
    assert chosen["interpolation"].startswith("dev-select") and chosen["dev_report_seen_by"]
    assert "a" in meta["interpolation"] and meta["interpolation"]["chosen_on"].startswith("dev-select")
    assert meta["dev_settings"]["split"] == "dev-report" and meta["dev_settings"]["looked_at_report_half"] is True
    for text in _strings({k: v for k, v in meta.items() if k != "vocab"}):
        assert not os.path.isabs(text) and "/work/" not in text and "/tmp/" not in text, text


def test_one_listing_order_read_from_each_checkpoints_type(tmp_path):
    """The app's Model list, its lecture keys, `models`, bench and the docs' tables all read `shipped`: types in
    the papers' order (a checkpoint named anything lists by its `model_type`), unknown or unreadable last."""
    from viewer.engine.checkpoints import listing_order, shipped
    assert listing_order({"zz": "sat-soft", "b": None, "a": "mystery", "updown": None, "x": "sat-hard"}) == \
        ["zz", "x", "updown", "a", "b"]
    assert shipped() == ["sat-soft", "sat-hard", "updown", "transformer", "updown-copy"]
    assert shipped(task="answer") == ["vqa-regions", "vqa-blind"]
    (tmp_path / "broken.safetensors").write_bytes(b"not a checkpoint")
    assert shipped(str(tmp_path), task=None) == ["broken"] and shipped(str(tmp_path)) == ["broken"]
