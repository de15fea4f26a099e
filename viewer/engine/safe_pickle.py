"""Open other projects' pickled checkpoints without running any of their code.

A pickle names the globals (functions, classes) it wants called while loading; a crafted file
can name `os.system`. This unpickler resolves only an allowlist: the tensor and storage
rebuilders, containers, argparse.Namespace and numpy arrays. Pickled modules and optimizers of
known classes (torch.nn layers, torchvision ResNet/VGG blocks, the community projects' own
`models.Encoder` ...) become `InertRecord`s: plain objects holding the pickled state; their class
code is never imported or run. Anything else is refused with an error naming the global.
"""
from __future__ import annotations

import builtins
import io
import pickle
import types
import warnings
import zipfile
from collections import OrderedDict, defaultdict

import numpy as np
import torch


class UnsafePickleError(ValueError):
    """The file asks for something that could run code; nothing of it was executed."""


class UnreadableFileError(ValueError):
    """Not a pickle or PyTorch file, or a damaged one."""


class InertRecord:
    """A pickled object of a known class, kept as data: `.state` (its __dict__) and `.args`."""

    global_name = "?"

    def __init__(self, *args, **kwargs):
        self.args, self.state = args, {}

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:   # (__dict__, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        self.state = dict(state) if isinstance(state, dict) else {"value": state}

    def __repr__(self) -> str:
        return f"<inert {self.global_name}>"


# Classes kept as records: torch/torchvision layers and optimizers, and the community projects'
# own classes as their pickles name them (sgrvinod and poojahira: models.*, AaronCCWong: encoder/
# decoder/attention modules, ruotianluo: models.AttModel.*).
_RECORD_PREFIXES = ("torch.nn.modules.", "torch.optim.")
_RECORD_CLASSES = {
    "torch.nn.utils.weight_norm.WeightNorm", "torchvision.models.resnet.ResNet",
    "torchvision.models.resnet.Bottleneck", "torchvision.models.resnet.BasicBlock", "torchvision.models.vgg.VGG",
    "models.Encoder", "models.DecoderWithAttention", "models.Attention",
    "encoder.Encoder", "decoder.Decoder", "attention.Attention",
    "models.AttModel.UpDownModel", "models.AttModel.UpDownCore", "models.AttModel.Attention",
}

_SAFE = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "defaultdict"): defaultdict,
    ("argparse", "Namespace"): types.SimpleNamespace,
    ("torch._utils", "_rebuild_tensor"): torch._utils._rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): torch._utils._rebuild_parameter_with_state,
    ("torch", "Size"): torch.Size,
    ("torch", "device"): torch.device,
    ("_codecs", "encode"): lambda text, encoding="utf-8": text.encode(encoding),
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}
for _np_module in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _SAFE[(_np_module, "_reconstruct")] = np._core.multiarray._reconstruct
    _SAFE[(_np_module, "scalar")] = np._core.multiarray.scalar
for _module in ("builtins", "__builtin__"):
    for _name in ("dict", "list", "set", "frozenset", "tuple", "int", "float", "bool", "str", "bytes", "complex"):
        _SAFE[(_module, _name)] = getattr(builtins, _name)

def _record_class(name: str) -> type:
    """A new class per request: a pickle's BUILD on the class itself can then change nothing shared."""
    return type(name.rsplit(".", 1)[-1], (InertRecord,), {"global_name": name})


def _fresh(fn):
    """A new function per request that calls `fn`: a pickle may BUILD on what find_class returns
    (e.g. set `__defaults__`), which must not alter torch's or numpy's real functions."""
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    return call


def _reconstructor(cls, base, state):
    """copyreg._reconstructor (protocols 0 and 1), for inert records only."""
    if not (isinstance(cls, type) and issubclass(cls, InertRecord)) or base is not object:
        raise UnsafePickleError("refused copyreg._reconstructor on a class that is not an inert record")
    return cls()


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE:
            found = _SAFE[(module, name)]
            return found if isinstance(found, type) else _fresh(found)   # built-in types refuse new attributes
        if (module, name) == ("copyreg", "_reconstructor"):
            return _fresh(_reconstructor)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        full = f"{module}.{name}"
        if full in _RECORD_CLASSES or full.startswith(_RECORD_PREFIXES):
            return _record_class(full)
        raise UnsafePickleError(
            f"refused to load: the file asks for the global `{full}`, which is not a tensor, container or "
            f"known model class and could run code. Nothing from the file was executed.")


# torch.load(pickle_module=...) takes a module-like object with Unpickler and load.
_pickle_module = types.SimpleNamespace(
    __name__="viewer.engine.safe_pickle", Unpickler=RestrictedUnpickler,
    load=lambda f, **kw: RestrictedUnpickler(f, **kw).load())


def load(path: str):
    """Any torch.save file (zip or legacy) or plain pickle, rebuilt without executing code.

    The file is read into memory and handed to torch as bytes, so torch's older tar-archive
    loader (which extracts members to disk) is never reached. TorchScript archives are refused:
    loading them runs their compiled code.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise UnreadableFileError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        return _load_bytes(data, path)
    except (UnsafePickleError, UnreadableFileError):
        raise
    except Exception as err:   # pickle's and torch's many ways of saying "damaged or not a pickle"
        raise UnreadableFileError(f"{path}: not a readable pickle or PyTorch file ({type(err).__name__}: "
                                  f"{' '.join(str(err).split())[:300]})") from None


def _load_bytes(data: bytes, path: str):
    if data[:4] == b"PK\x03\x04":                 # torch.save's zip format
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            if any(n.endswith("constants.pkl") or "/code/" in n for n in z.namelist()):
                raise UnsafePickleError(f"{path}: a TorchScript archive; save and import the model's state_dict instead")
        return torch.load(io.BytesIO(data), map_location="cpu", pickle_module=_pickle_module, weights_only=False)
    obj = RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    if obj == torch.serialization.MAGIC_NUMBER:   # the pre-1.6 torch.save format
        with warnings.catch_warnings():           # it compares pickled class source with ours: records have none
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(data), map_location="cpu", pickle_module=_pickle_module, weights_only=False)
    return obj


def module_tensors(record, prefix: str = "") -> dict[str, torch.Tensor]:
    """The state_dict a pickled module record would give: parameters and persistent buffers,
    dotted names, weight-norm pairs (weight_g, weight_v) folded back into the weight they define."""
    if not isinstance(record, InertRecord):
        raise ValueError(f"expected a pickled module, found {type(record).__name__}")
    state = record.state
    out: dict[str, torch.Tensor] = {}
    for k, v in (state.get("_parameters") or {}).items():
        if v is not None:
            out[prefix + k] = v.detach()
    skip = state.get("_non_persistent_buffers_set") or set()
    for k, v in (state.get("_buffers") or {}).items():
        if v is not None and k not in skip:
            out[prefix + k] = v
    for hook in (state.get("_forward_pre_hooks") or {}).values():
        if isinstance(hook, InertRecord) and hook.global_name.endswith("WeightNorm"):
            name, dim = hook.state["name"], hook.state["dim"]
            g, v = out.pop(prefix + name + "_g"), out.pop(prefix + name + "_v")
            out[prefix + name] = torch._weight_norm(v, g, dim)
    for k, child in (state.get("_modules") or {}).items():
        if child is not None:
            out.update(module_tensors(child, f"{prefix}{k}."))
    return out
