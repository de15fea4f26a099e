"""The registry of per-word map methods, in the order the app and the reports list them. A new
method is one file over `Method` (base.py) and one entry here."""
from __future__ import annotations

from .attention import Attention
from .base import Method
from .gradcam import GradCam, gradcam_maps
from .kernelshap import KernelShap
from .occlusion import Occlusion
from .relevancy import Relevancy, relevancy_maps
from .superpixels import Superpixels, segments

REGISTRY: dict[str, Method] = {m.name: m for m in (
    Attention(),
    Occlusion("occlusion", "occlusion (what it needed)", ((4, 2), (6, 4))),
    Superpixels(),
    GradCam(),
    Relevancy(),
    KernelShap(),
    Occlusion("occlusion-fine", "occlusion, fine (2- and 3-cell windows)", ((2, 1), (3, 1))),
)}

__all__ = ["REGISTRY", "Method", "gradcam_maps", "relevancy_maps", "segments"]
