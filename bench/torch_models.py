"""The PyTorch halves of bench/models.py: ResNet and GPT-2 in torch.nn, with the parameter names of glassgrad's.

torchvision is not needed: TorchResNet is torchvision's ResNet (same module names, so its state dict is
glassgrad/models/resnet.py's), and TorchGPT2 holds glassgrad/models/gpt2.py's parameters under the same names and
computes with bench/gpt2.py's torch_gpt2 (which test/test_gpt2.py checks against the glassgrad model).
"""

from __future__ import annotations

import torch
from torch import nn

from bench.gpt2 import torch_gpt2
from glassgrad.models.gpt2 import GPT2Config


class TorchBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = torch_shortcut(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + self.downsample(x))


class TorchBottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = torch_shortcut(in_planes, planes * 4, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        return torch.relu(self.bn3(self.conv3(out)) + self.downsample(x))


def torch_shortcut(in_planes: int, out_planes: int, stride: int) -> nn.Sequential:
    if stride == 1 and in_planes == out_planes:
        return nn.Sequential()  # no parameters: the identity, as torchvision's downsample=None
    return nn.Sequential(nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False), nn.BatchNorm2d(out_planes))


class TorchResNet(nn.Module):
    """torchvision's ResNet (and glassgrad's: the same arguments), written here so torchvision is not needed."""

    def __init__(self, block: str, layers: list[int], num_classes: int = 1000, width: int = 64,
                 cifar_stem: bool = False):  # fmt: skip
        super().__init__()
        block_type = {"basic": TorchBasicBlock, "bottleneck": TorchBottleneck}[block]
        if cifar_stem:
            self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.Identity() if cifar_stem else nn.MaxPool2d(3, stride=2, padding=1)
        in_planes = width
        for stage, blocks in enumerate(layers):
            planes, stride, stage_blocks = width * 2**stage, 1 if stage == 0 else 2, []
            for i in range(blocks):
                stage_blocks.append(block_type(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes * block_type.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*stage_blocks))
        self.fc = nn.Linear(in_planes, num_classes)
        self.stages = len(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        for stage in range(1, self.stages + 1):
            x = getattr(self, f"layer{stage}")(x)
        return self.fc(x.mean((2, 3)))


class TorchGPT2(nn.Module):
    """glassgrad's GPT2 parameters (same names and shapes); forward is bench/gpt2.py's torch_gpt2 over them."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.cfg = cfg
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
        self.h = nn.ModuleList(TorchBlock(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch_gpt2(dict(self.named_parameters()), self.cfg, tokens)


class TorchBlock(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        width = cfg.n_embd
        self.ln_1, self.ln_2 = (nn.LayerNorm(width, eps=cfg.layer_norm_eps) for _ in range(2))
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
