"""Lecture mode: number key k picks the Model list's k-th model, one key per shipped model. Not in
session.py, so `--help` can name them without importing torch; not in the package's __init__, which
imports ui.py and panels.py that need them too."""

MODEL_KEYS = tuple(range(1, 6))   # the five shipped captioners (engine/checkpoints.py shipped)
