"""Decoders behind one interface (base.py); importing this package fills the registry."""
from . import sat, updown  # noqa: F401  (registers sat-soft, sat-hard, updown)
from .base import REGISTRY, CaptionModel, Step, build_model, register, reorder

__all__ = ["REGISTRY", "CaptionModel", "Step", "build_model", "register", "reorder"]
