"""Import checkpoints of the community's best-known captioning implementations into our safe format.

`import_checkpoint` opens the file with the restricted unpickler (nothing in it runs), asks each
format module whether it recognises the contents, converts the weights to one of our registered
models (sat-sgrvinod, sat-aaronccwong, updown-ruotianluo, updown-poojahira), puts the vocabulary
in our order and saves tensors + JSON metadata. A new format is one module with `matches` and
`convert`, added to FORMATS.
"""
from __future__ import annotations

from ..engine.safe_pickle import UnsafePickleError, load
from . import aaronccwong, poojahira, ruotianluo, sgrvinod
from .common import ConversionError, save_imported

FORMATS = {"sgrvinod": sgrvinod, "poojahira": poojahira, "aaronccwong": aaronccwong, "ruotianluo": ruotianluo}

__all__ = ["FORMATS", "ConversionError", "UnsafePickleError", "import_checkpoint"]


def import_checkpoint(path: str, out: str, word_map: str | None = None, infos: str | None = None,
                      encoder_weights: str | None = None) -> str:
    """Convert `path` and write `out`(.safetensors); returns the written path."""
    obj = load(path)   # raises UnsafePickleError / UnreadableFileError (both ValueError) with the reason
    found = [name for name, fmt in FORMATS.items() if fmt.matches(obj)]
    if not found:
        keys = list(obj)[:6] if isinstance(obj, dict) else type(obj).__name__
        raise ConversionError(f"{path}: not a checkpoint of {', '.join(FORMATS)} (it holds {keys})")
    try:
        imported = FORMATS[found[0]].convert(obj, word_map=word_map, infos=infos, encoder_weights=encoder_weights)
    except (KeyError, IndexError, TypeError, AttributeError) as err:   # a layer or field the format always has
        raise ConversionError(f"{path}: looks like a {found[0]} checkpoint but is incomplete or changed "
                              f"({type(err).__name__}: {err})") from None
    imported.source["file"] = path
    return save_imported(imported, out)
