"""The one place that knows where the viewer's files are.

In a source checkout they are the repository's folders: checkpoints/, assets/, triage/ and
.cache/features next to the `viewer` package. Installed (`pip install .`), the shipped checkpoints
and example photos live inside the package, in viewer/_data/ (pyproject.toml maps them there),
and what the viewer writes goes to the current folder (triage/, and checkpoints/ for the models you
import or ship, which are found by name beside the shipped ones) and the user's cache folder.
"""
from __future__ import annotations

import os

PACKAGE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(PACKAGE, "_data")            # only in an installed copy
INSTALLED = os.path.isdir(os.path.join(DATA, "checkpoints"))

if INSTALLED:
    ROOT = os.getcwd()                            # where reports go, as with `python -m viewer triage`
    CHECKPOINT_DIR = os.path.join(DATA, "checkpoints")
    ASSETS = os.path.join(DATA, "assets")
    CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                             "attention-viewer", "features")
else:
    ROOT = os.path.dirname(PACKAGE)               # the repository
    CHECKPOINT_DIR = os.path.join(ROOT, "checkpoints")
    ASSETS = os.path.join(ROOT, "assets")
    CACHE_DIR = os.path.join(ROOT, ".cache", "features")

OWN_CHECKPOINT_DIR = os.path.join(ROOT, "checkpoints")   # where `import` and `evaluate --ship` write by default
MODEL_DIRS = tuple(dict.fromkeys((CHECKPOINT_DIR, OWN_CHECKPOINT_DIR)))   # where a model name is looked up, in order
TRIAGE_DIR = os.path.join(ROOT, "triage")
# Flickr8k where the project's data sits (../shared/data): the reference photos of the "guessed" verdict
FLICKR8K = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "flickr8k"))
