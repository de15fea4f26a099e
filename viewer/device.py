"""Device choice: CUDA when present, overridable with --device or VIEWER_DEVICE."""
from __future__ import annotations

import os

import torch


def pick_device(name: str | None = None) -> torch.device:
    name = name or os.environ.get("VIEWER_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but CUDA is not available here; use --device cpu")
    return torch.device(name)
