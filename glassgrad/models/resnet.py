"""ResNet-18, -34 and -50 (He et al., 2015) with torchvision's parameter names, so state dicts load both ways.

torchvision's layout: a stem (conv1, bn1, ReLU, a 3x3 max-pool of stride 2), four stages layer1..layer4 of blocks
(BasicBlock: two 3x3 convolutions; Bottleneck: 1x1, 3x3, 1x1 widening four times, the stride on the 3x3 as in
torchvision's "ResNet v1.5"), each block adding its input (through `downsample`, a 1x1 convolution and a batchnorm,
where the shape changes), then a global average pool and the classifier fc. `cifar_stem=True` swaps the stem for
the one used on 32x32 images: a 3x3 convolution of stride 1 and no max-pool. `width` scales every stage (64 in
torchvision; 8 makes a tiny model for tests).
"""

from __future__ import annotations

from glassgrad import Tensor, nn


class BasicBlock:
    """Two 3x3 convolutions with batchnorms; the input added back before the last ReLU."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = shortcut(in_planes, planes * self.expansion, stride)

    def __call__(self, x: Tensor) -> Tensor:
        out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        return (out + sequential(self.downsample, x)).relu()


class Bottleneck:
    """1x1 down to `planes`, 3x3 (carrying the stride), 1x1 up to 4 * planes; the input added back."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.downsample = shortcut(in_planes, planes * self.expansion, stride)

    def __call__(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = self.bn2(self.conv2(out)).relu()
        out = self.bn3(self.conv3(out))
        return (out + sequential(self.downsample, x)).relu()


def shortcut(in_planes: int, out_planes: int, stride: int) -> list:
    """torchvision's `downsample`: [1x1 convolution, batchnorm] where the block changes the shape, else nothing."""
    if stride == 1 and in_planes == out_planes:
        return []
    return [nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False), nn.BatchNorm2d(out_planes)]


def sequential(layers: list, x: Tensor) -> Tensor:
    """x through each layer in turn (an empty list is the identity)."""
    for layer in layers:
        x = layer(x)
    return x


class ResNet:
    """A ResNet of `block`s, `layers[i]` of them in stage i; model(images (N, 3, H, W)) gives logits (N, classes)."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: list[int], num_classes: int = 1000,
                 width: int = 64, cifar_stem: bool = False):  # fmt: skip
        self.cifar_stem = cifar_stem
        if cifar_stem:
            self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        in_planes = width
        for stage, blocks in enumerate(layers):
            planes, stride = width * 2**stage, 1 if stage == 0 else 2
            stage_blocks = []
            for i in range(blocks):
                stage_blocks.append(block(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes * block.expansion
            setattr(self, f"layer{stage + 1}", stage_blocks)
        self.fc = nn.Linear(in_planes, num_classes)
        self.stages = len(layers)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"ResNet: images must be (batch, 3, height, width), got shape {x.shape}")
        x = self.bn1(self.conv1(x)).relu()
        if not self.cifar_stem:
            x = x.max_pool2d(kernel_size=3, stride=2, padding=1)
        for stage in range(1, self.stages + 1):
            x = sequential(getattr(self, f"layer{stage}"), x)
        return self.fc(x.mean((2, 3)))


def resnet18(**kwargs) -> ResNet:
    """ResNet-18: BasicBlocks, 2 per stage."""
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


def resnet34(**kwargs) -> ResNet:
    """ResNet-34: BasicBlocks, 3, 4, 6 and 3 per stage."""
    return ResNet(BasicBlock, [3, 4, 6, 3], **kwargs)


def resnet50(**kwargs) -> ResNet:
    """ResNet-50: Bottlenecks, 3, 4, 6 and 3 per stage."""
    return ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)
