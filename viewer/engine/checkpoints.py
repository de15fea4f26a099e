"""Our checkpoint format: one `.safetensors` file, tensors only, with JSON metadata in its header.

safetensors cannot execute code on load (no pickle). The metadata says everything needed to
rebuild the model and check it fits this code: model type and hyper-parameters, vocabulary,
the vision spec it was trained on, training data, dev metrics, date and code version.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess

import torch
from safetensors import SafetensorError
from safetensors.torch import safe_open, save_file

from .vocab import Vocabulary
from .loaded import CheckpointError, LoadedModel, stored_vision_spec   # other code imports them from here too
from .models import REGISTRY, CaptionModel, build_model
from ..paths import MODEL_DIRS, OWN_CHECKPOINT_DIR
from .vision import SPEC, SPEC_KEY, FeatureSource, VisionSpec

HF_PREFIX = "hf:"             # --model hf:PATH: a local Hugging Face folder (models/hf.py)
HUB_PREFIX = "hf-hub:"        # --model hf-hub:ORG/NAME[@REVISION]: the hub's copy, fetched only when asked so
ENCODER_PREFIX = "encoder."   # an imported model's own grid encoder, stored next to its decoder

FORMAT = "attention-viewer-checkpoint/1"
REQUIRED = ("format", "name", "model_type", "hparams", "vocab", "vision_spec_key")
# metadata keys (at any depth) that hold file paths: an absolute one keeps only its base name on save
PATH_KEYS = ("averaged_from", "init_from", "data", "out", "cache", "file")


def code_version() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _portable_path(value):
    """An absolute path (POSIX, Windows or ~) cut to its base name; anything else as it is."""
    if isinstance(value, str) and (os.path.isabs(value) or value.startswith("~") or re.match(r"[A-Za-z]:[\\/]", value)):
        return re.split(r"[\\/]", value.rstrip("\\/"))[-1]
    return value


def portable(meta):
    """The metadata without the writing machine's paths: every absolute path under a `PATH_KEYS` key, at any
    depth (alone or in a list), becomes its base name (/work/main/runs/x/last.safetensors -> last.safetensors)."""
    if isinstance(meta, list):
        return [portable(v) for v in meta]
    if not isinstance(meta, dict):
        return meta
    out = {}
    for k, v in meta.items():
        if k in PATH_KEYS and isinstance(v, (str, list)):
            out[k] = [_portable_path(x) for x in v] if isinstance(v, list) else _portable_path(v)
        else:
            out[k] = portable(v)
    return out


def save(path: str, model: CaptionModel, vocab: Vocabulary, name: str, model_type: str, hparams: dict,
         extra: dict | None = None, half: bool = True, vision_spec: VisionSpec = SPEC,
         encoder_tensors: dict[str, torch.Tensor] | None = None) -> None:
    """`vision_spec` and `encoder_tensors` are for imported models that bring their own encoder."""
    meta = {"format": FORMAT, "name": name, "model_type": model_type, "hparams": hparams, "vocab": vocab.words,
            "vision_spec_key": vision_spec.key, "vision_spec": vision_spec.to_json(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "code_version": code_version(),
            **(extra or {})}
    meta = portable(meta)
    clashing = [k for k in model.state_dict() if k.startswith(ENCODER_PREFIX)]
    if clashing:  # load() would take these weights for an imported image encoder
        raise ValueError(f"{model_type}: weight names may not start with {ENCODER_PREFIX!r} ({clashing[0]})")
    named = {**model.state_dict(), **{ENCODER_PREFIX + k: v for k, v in (encoder_tensors or {}).items()}}
    tensors = {k: (v.half() if half and v.is_floating_point() else v).contiguous().cpu() for k, v in named.items()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    save_file(tensors, tmp, metadata={"viewer": json.dumps(meta)})
    os.replace(tmp, path)


def ship(loaded: LoadedModel, path: str, name: str, updates: dict) -> None:
    """Save a loaded model under a new name (fp16), its metadata updated (e.g. measured dev scores)."""
    meta = {**loaded.meta, **updates}
    extra = {k: v for k, v in meta.items() if k not in ("format", "name", "model_type", "hparams", "vocab",
                                                        "vision_spec_key", "vision_spec", "date", "code_version")}
    save(path, loaded.model, loaded.vocab, name, meta["model_type"], meta["hparams"], extra, half=True,
         vision_spec=loaded.vision_spec, encoder_tensors=loaded.encoder_tensors)


def update_meta(path: str, updates: dict) -> dict:
    """Rewrite a checkpoint's metadata in place: `updates` merged in at the top level, machine paths
    stripped (`portable`); the tensors are copied as stored, bit for bit. Returns the new metadata."""
    meta = portable({**read_meta(path), **updates})
    try:
        with safe_open(path, framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: its tensors cannot be read ({err})") from None
    tmp = path + ".tmp"
    save_file(tensors, tmp, metadata={"viewer": json.dumps(meta)})
    os.replace(tmp, path)
    return meta


def is_hf(path: str) -> bool:
    return path.startswith((HF_PREFIX, HUB_PREFIX))


def read_meta(path: str) -> dict:
    """The checkpoint's metadata, validated; raises CheckpointError with a readable reason. For an
    `hf:` folder: what its config.json says (models/hf.folder_meta), no weights read."""
    if is_hf(path):
        from .models.hf_folder import check_folder, folder_meta, folder_of
        folder, name = folder_of(path)
        return folder_meta(name, folder, check_folder(folder, path))
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with safe_open(path, framework="pt") as f:
            header = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a safetensors checkpoint of this viewer ({err})") from None
    if "viewer" not in header:
        raise CheckpointError(f"{path}: a safetensors file without viewer metadata; convert it with `python -m viewer import`")
    try:
        meta = json.loads(header["viewer"])
    except json.JSONDecodeError:
        raise CheckpointError(f"{path}: its metadata is not valid JSON") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: its metadata is a JSON {type(meta).__name__}, not an object")
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise CheckpointError(f"{path}: metadata lacks {', '.join(missing)}")
    for key, kind in (("model_type", str), ("hparams", dict), ("vocab", list)):
        if key in meta and not isinstance(meta[key], kind):
            raise CheckpointError(f"{path}: metadata's {key} is a {type(meta[key]).__name__}, not a {kind.__name__}")
    if "vocab" in meta and not all(isinstance(w, str) for w in meta["vocab"]):
        raise CheckpointError(f"{path}: metadata's vocab holds something other than words")
    if meta["format"] != FORMAT:
        raise CheckpointError(f"{path}: format {meta['format']!r}, this code reads {FORMAT!r}")
    if meta["model_type"] not in REGISTRY:
        raise CheckpointError(f"{path}: unknown model type {meta['model_type']!r}; known: {', '.join(sorted(REGISTRY))}")
    try:
        spec = stored_vision_spec(meta)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise CheckpointError(f"{path}: {err}") from None
    if spec.brings_own_features and meta["vision_spec_key"] != spec.key:
        raise CheckpointError(f"{path}: its vision spec does not match its key; the metadata was edited")
    if not spec.brings_own_features and meta["vision_spec_key"] != SPEC_KEY:
        raise CheckpointError(f"{path}: trained on other image features ({meta['vision_spec_key']}); this code computes {SPEC_KEY}")
    return meta


def load(path: str, device: torch.device | str = "cpu") -> LoadedModel:
    if is_hf(path):   # a Hugging Face folder (models/hf.py)
        from .models.hf import load_folder
        return load_folder(path, device)
    meta = read_meta(path)
    try:
        with safe_open(path, framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: its tensors cannot be read ({err})") from None
    encoder = {k[len(ENCODER_PREFIX):]: tensors.pop(k) for k in list(tensors) if k.startswith(ENCODER_PREFIX)}
    if stored_vision_spec(meta).source == FeatureSource.CARRIED and not encoder:
        raise CheckpointError(f"{path}: says it carries its image encoder, but has no encoder weights")
    try:
        vocab = Vocabulary(meta["vocab"])
        with torch.device("meta"):   # first without memory: hyper-parameters must make the stored weights' shapes
            problems = weight_mismatches(build_model(meta["model_type"], **meta["hparams"]), tensors)
        if problems:
            raise CheckpointError(f"{path}: weights do not match a {meta['model_type']} model "
                                  f"({', '.join(problems[:4])}...)")
        model = build_model(meta["model_type"], **meta["hparams"])
    except (TypeError, ValueError, OverflowError, RuntimeError, KeyError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(f"{path}: cannot rebuild the model from its metadata ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''})") from None
    expected = model.state_dict()
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()})
    return LoadedModel(model.to(device).eval(), vocab, meta, path, encoder)


def weight_mismatches(model: CaptionModel, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names missing on either side, then names whose shapes differ: empty when the weights fit."""
    expected = model.state_dict()
    problems = sorted(set(expected) ^ set(tensors))
    return problems + [k for k in expected if k in tensors and expected[k].shape != tensors[k].shape]


def average(paths: list[str], out: str, weights: list[float] | None = None) -> LoadedModel:
    """Save the weight average of several checkpoints ("model soup", Wortsman et al. 2022).

    Only fine-tunes of one model average meaningfully (same architecture, vocabulary and start):
    e.g. the best epoch, a low-learning-rate continuation and a self-critical epoch of it.
    `weights` (one per checkpoint, summing to 1; default equal): with two checkpoints, 1 - a and a
    interpolate from the first to the second (WiSE-FT).
    """
    weights = [1 / len(paths)] * len(paths) if weights is None else list(weights)
    if len(weights) != len(paths) or abs(sum(weights) - 1) > 1e-6 or min(weights) < 0:
        raise CheckpointError(f"give one weight >= 0 per checkpoint ({len(paths)}), summing to 1: got {weights}")
    models = [load(p) for p in paths]
    first = models[0]
    for lm in models[1:]:
        if (lm.meta["model_type"], lm.meta["hparams"], lm.vocab.words, lm.vision_spec) != \
                (first.meta["model_type"], first.meta["hparams"], first.vocab.words, first.vision_spec) or \
                lm.encoder_tensors.keys() != first.encoder_tensors.keys() or \
                not all(torch.equal(v, first.encoder_tensors[k]) for k, v in lm.encoder_tensors.items()):
            raise CheckpointError(f"{lm.path}: another architecture, vocabulary or image encoder than {first.path}; "
                                  "cannot average")
    states = [lm.model.state_dict() for lm in models]
    mean = {k: sum(w * s[k].float() for w, s in zip(weights, states)) if v.is_floating_point() else v
            for k, v in states[0].items()}
    first.model.float().load_state_dict(mean)
    extra = {k: v for k, v in first.meta.items() if k in ("training", "imported_from")}
    save(out, first.model, first.vocab, first.name, first.meta["model_type"], first.meta["hparams"],
         {**extra, "averaged_from": list(paths), "average_weights": weights}, half=False,
         vision_spec=first.vision_spec, encoder_tensors=first.encoder_tensors)
    return load(out)


def available(folder: str | None = None, task: str | None = None) -> dict[str, str]:
    """Model name -> checkpoint path for every checkpoint in `folder` (default: `paths.MODEL_DIRS`,
    the first folder winning a name). A sub-folder with a config.json is a Hugging Face model,
    listed as `hf:NAME` -> `hf:FOLDER` (models/hf.py checks it when it loads). `task` ("caption" or
    "answer"): only the models that do it (an unreadable file is left to the caller, unfiltered)."""
    found: dict[str, str] = {}
    for d in [folder] if folder else MODEL_DIRS:
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.endswith(".safetensors"):
                found.setdefault(f[: -len(".safetensors")], os.path.join(d, f))
            elif os.path.isfile(os.path.join(d, f, "config.json")):
                found.setdefault(HF_PREFIX + f, HF_PREFIX + os.path.join(d, f))
    return found if task is None else {name: path for name, path in found.items() if model_task(path) in (task, None)}


# The one order models are listed in (the app's Model list and its lecture keys, `models`, `bench`, the docs'
# tables and examples): by their type, as each checkpoint's `model_type` says, in the papers' order; then by name.
TYPE_ORDER = ("sat-soft", "sat-hard", "updown", "transformer", "updown-copy", "vqa-regions", "vqa-grid", "vqa-bow",
              "vqa-blind")


def listing_order(types: dict[str, str | None]) -> list[str]:
    """Model names (name -> model type, or None if unknown) sorted into TYPE_ORDER, unknown types last."""
    rank = lambda t: TYPE_ORDER.index(t) if t in TYPE_ORDER else len(TYPE_ORDER)   # noqa: E731
    return sorted(types, key=lambda name: (rank(types[name] or name), name))


def shipped(folder: str | None = None, task: str | None = "caption") -> list[str]:
    """The models in `folder` (default: the shipped ones) that do `task`, in listing order: the one list of them."""
    found = available(folder, task=task)
    return listing_order({name: _model_type(path) for name, path in found.items()})


def _model_type(path: str) -> str | None:
    try:
        return read_meta(path).get("model_type")
    except CheckpointError:
        return None


def model_task(path: str) -> str | None:
    """What a checkpoint does: "answer" (question answering), "caption", or None if it cannot be read."""
    try:
        return read_meta(path).get("task", "caption")
    except CheckpointError:
        return None


def named_path(name: str, folder: str | None = None) -> str:
    """Where a model saved under `name` goes: `folder`, by default checkpoints/ of the checkout (or,
    installed, of the current folder: never into the installed package)."""
    return os.path.join(folder or OWN_CHECKPOINT_DIR, f"{name}.safetensors")


def resolve(name_or_path: str, folder: str | None = None) -> str:
    """A model name from checkpoints/ or a path to a checkpoint file, with or without its .safetensors
    (`import --out runs/x` writes runs/x.safetensors, which `--model runs/x` then finds); `hf:PATH`, a
    Hugging Face folder: `hf:NAME` of a folder in checkpoints/ (see `available`), else `hf:PATH` as it is."""
    if is_hf(name_or_path):
        return available(folder).get(name_or_path, name_or_path)
    if os.path.sep in name_or_path or name_or_path.endswith(".safetensors") or os.path.isfile(name_or_path):
        if not os.path.isfile(name_or_path) and os.path.isfile(name_or_path + ".safetensors"):
            return name_or_path + ".safetensors"
        return name_or_path
    found = available(folder)
    if name_or_path not in found:
        raise CheckpointError(f"no model named {name_or_path!r}; available: {', '.join(found) or 'none (train one first)'}")
    return found[name_or_path]
