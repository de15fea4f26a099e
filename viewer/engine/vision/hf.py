"""A Hugging Face captioning model's own image encoder (ViT), for `hf:` models (models/hf.py).

Photos -> (B, K, (1 + n) D) rows, one per patch (row-major, K = (image/patch)^2): [patch token,
the n special tokens (ViT's class token; DeiT's class and distillation tokens)], the encoder's last
hidden states. The preprocessing is the folder's own image processor
(preprocessor_config.json: its resize, rescale and normalisation), run on the photo as loaded.
"""
from __future__ import annotations

import torch

from ..images import Photo


class HFImageEncoder:
    def __init__(self, encoder, processor, side: int, special: int = 1, device: torch.device | str = "cpu"):
        self.encoder, self.processor, self.side, self.special = encoder, processor, side, special
        self.device = torch.device(device)

    def preprocess(self, photos: list[Photo]) -> torch.Tensor:
        """The folder's processor, but never a centre crop (DeiT's 256 -> 224): every map is drawn over
        the whole photo, so the model must see the whole photo (resized straight to the crop size)."""
        crop = {}
        if getattr(self.processor, "do_center_crop", False):
            crop = {"do_center_crop": False, "size": dict(self.processor.crop_size)}
        return self.processor(images=[p.rgb for p in photos], return_tensors="pt", **crop)["pixel_values"].to(self.device)

    def encode(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """pixel_values -> packed rows (see above)."""
        states = self.encoder(pixel_values=pixel_values).last_hidden_state        # (B, n + K, D)
        k, n = self.side * self.side, self.special
        if states.shape[1] != n + k:
            raise ValueError(f"the encoder gave {states.shape[1]} tokens, not {n} special + {k} patches")
        special = states[:, :n].reshape(len(states), 1, -1).expand(-1, k, -1)
        return torch.cat([states[:, n:], special], -1)

    @torch.inference_mode()
    def __call__(self, photos: list[Photo]) -> torch.Tensor:
        return self.encode(self.preprocess(photos)).float().cpu()
