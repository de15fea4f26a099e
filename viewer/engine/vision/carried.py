"""Grid encoders that travel inside an imported checkpoint, with the preprocessing their decoder expects.

Community SAT models were trained on their own encoder's features: sgrvinod's on ResNet-101
(up to layer4, adaptive-pooled to 14x14, photos squashed to 256x256), AaronCCWong's on
VGG-19 conv5_4 (224x224 gives 14x14). The import stores those weights under `encoder.` in our
checkpoint and a spec like {"type": "resnet", "layers": [3, 4, 23, 3], "input": 256, ...};
this module rebuilds the network from torchvision's architecture code (no download) and runs it.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

from ..images import Photo
from .spec import FeatureSource, VisionSpec

IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def resnet_spec(layers: list[int], input_size: int = 256, grid: int = 14) -> VisionSpec:
    return VisionSpec(FeatureSource.CARRIED, {
        "type": "resnet", "layers": list(layers), "input": input_size, "resize": "bilinear squash",
        "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "grid": grid, "dim": 2048})


def vgg19_spec(input_size: int = 224) -> VisionSpec:
    return VisionSpec(FeatureSource.CARRIED, {
        "type": "vgg19", "input": input_size, "resize": "bilinear squash",
        "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "grid": input_size // 16, "dim": 512})


class ResNetGrid(nn.Module):
    """torchvision ResNet without its pool and classifier (`resnet.0` .. `resnet.7`), pooled to grid x grid."""

    def __init__(self, layers: list[int], grid: int):
        super().__init__()
        import torchvision   # here, not at the top: it costs seconds at app start
        net = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, layers)
        self.resnet = nn.Sequential(*list(net.children())[:-2])
        self.adaptive_pool = nn.AdaptiveAvgPool2d((grid, grid))

    def forward(self, x):
        return self.adaptive_pool(self.resnet(x))


class VGGGrid(nn.Module):
    """torchvision VGG-19 `features` without the last max-pool (conv5_4 + ReLU)."""

    def __init__(self):
        super().__init__()
        import torchvision
        self.features = nn.Sequential(*list(torchvision.models.vgg19().features.children())[:-1])

    def forward(self, x):
        return self.features(x)


class CarriedEncoder:
    """Photos -> (B, grid*grid, dim) row-major annotation vectors, as the imported decoder saw them."""

    def __init__(self, spec: VisionSpec, tensors: dict[str, torch.Tensor], device: torch.device | str = "cpu"):
        self.spec = spec = spec.details
        self.device = torch.device(device)
        net = ResNetGrid(spec["layers"], spec["grid"]) if spec["type"] == "resnet" else VGGGrid()
        net.load_state_dict({k: v.float() for k, v in tensors.items()})
        self.net = net.to(self.device).eval().requires_grad_(False)
        self.mean = torch.tensor(spec["mean"], device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(spec["std"], device=self.device).view(1, 3, 1, 1)

    def preprocess(self, photos: list[Photo]) -> torch.Tensor:
        size = self.spec["input"]
        arrays = [np.asarray(Image.fromarray(p.rgb).resize((size, size), Image.Resampling.BILINEAR)) for p in photos]
        x = torch.from_numpy(np.stack(arrays)).to(self.device).permute(0, 3, 1, 2).float() / 255.0
        return (x - self.mean) / self.std

    @torch.inference_mode()
    def __call__(self, photos: list[Photo]) -> torch.Tensor:
        fmap = self.net(self.preprocess(photos))
        return fmap.flatten(2).transpose(1, 2).float().cpu()
