"""Device choice: CUDA when present, overridable with --device or VIEWER_DEVICE."""
from __future__ import annotations

import os

import torch


def pick_device(name: str | None = None) -> torch.device:
    name = name or os.environ.get("VIEWER_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but CUDA is not available here; use --device cpu")
    return torch.device(name)


def share_cpu_with_browser() -> int:
    """Give torch half the cores (at least one) while serving the app, unless OMP_NUM_THREADS says.

    The browser, the page's requests and the view drawing share the machine with the model. An op
    split over every core waits for its slowest thread, so one busy core stalls it: on 2 cores with
    one core busy, a caption took 530-590 ms with 2 threads and 170-190 ms with 1 (quiet: the same).
    """
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    return torch.get_num_threads()
