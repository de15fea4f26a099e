"""Decoders behind one interface (base.py); importing this package fills the registry."""
from . import sat, sat_gated, transformer, updown, updown_copy, vqa  # noqa: F401  fills REGISTRY
from .base import REGISTRY, CaptionModel, Step, build_model, register, reorder

__all__ = ["REGISTRY", "CaptionModel", "Step", "build_model", "register", "reorder"]
