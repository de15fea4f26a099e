"""Deep links to a result: `?photo=coffee.jpg&model=updown&word=3` opens the app on that example photo,
captioned by that model with Explore's default settings, at that word. Only the example photos (assets/)
can be named: an uploaded photo stays on the machine it was uploaded to, so it has no link."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import urlencode

from ..paths import ASSETS


class Link(NamedTuple):
    photo: str    # the example photo's path
    model: str
    word: int     # 1-based, as the step slider counts


@lru_cache(maxsize=1)
def _examples() -> dict[str, str]:
    """Example photo file name -> the SHA-1 of its bytes."""
    found = {}
    for name in sorted(os.listdir(ASSETS)):
        if name.endswith(".jpg"):
            with open(os.path.join(ASSETS, name), "rb") as f:
                found[name] = hashlib.sha1(f.read()).hexdigest()
    return found


def read_link(params: dict[str, str], models: list[str]) -> Link | None:
    """The link in a page's query parameters; None when it names no photo; ValueError (one line a
    person can act on) when it names a photo, model or word that is not there."""
    name = params.get("photo")
    if not name:
        return None
    if name not in _examples():
        raise ValueError(f"The link names the photo {name!r}; links can name an example photo: "
                         + ", ".join(_examples()))
    model = params.get("model") or models[0]
    if model not in models:
        raise ValueError(f"The link names the model {model!r}; this app has {', '.join(models)}")
    word = params.get("word", "1")
    if not word.isdigit() or int(word) < 1:
        raise ValueError(f"The link's word {word!r} is no word number (1 is the first word)")
    return Link(os.path.join(ASSETS, name), model, int(word))


def link_query(photo_path: str | None, model: str) -> str:
    """The query of a link to `photo_path` captioned by `model` (the page adds `&word=N`), or "" when the
    photo is no example: its bytes decide, not its name (an upload called coffee.jpg is not ours)."""
    if not photo_path or not os.path.isfile(photo_path):
        return ""
    with open(photo_path, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()
    name = next((n for n, d in _examples().items() if d == digest), None)
    return "?" + urlencode({"photo": name, "model": model}) if name else ""
