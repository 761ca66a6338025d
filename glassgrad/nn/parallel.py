"""Data-parallel training in one process: a model's tensors copied onto several devices, each batch split across
them along its first axis (Tensor.shard; glassgrad/uop/multi.py says how ops run on such tensors).

Nothing else changes: a replicated weight meets the split batch as a broadcast, whose gradient sums over the split
axis, and a sum over the split axis all-reduces; so every device holds the whole batch's gradient, an optimizer
made after `replicate` keeps its state as a copy on each device, and each device takes the step one device takes
on the whole batch. BatchNorm's batch statistics are over the whole batch too (PyTorch's SyncBatchNorm).
"""

from __future__ import annotations

from typing import Any

from glassgrad.nn.state import get_state_dict
from glassgrad.runtime.device import Device
from glassgrad.tensor import Tensor


def local_devices(count: int, device: str | None = None) -> tuple[str, ...]:
    """`count` devices of `device`'s kind (default: the default device's): CUDA gives ("CUDA", "CUDA:1", ...),
    CPU gives ("CPU", "CPU:1", ...)."""
    if count < 1:
        raise ValueError(f"local_devices: count must be at least 1, got {count}")
    kind = Device.canonicalize(device or Device.DEFAULT).partition(":")[0]
    return Device.canonicalize(tuple(f"{kind}:{i}" for i in range(count)))


def replicate(model: Any, devices: str | tuple[str, ...]) -> Any:
    """Every tensor of `model`'s state dict (parameters and buffers) moved in place onto `devices`, realized: a
    tuple makes a full copy on each device, one device name brings a replicated model back to it. Returns `model`;
    make its optimizer after this (the optimizer's state is made like the parameters)."""
    tensors = list({id(t): t for t in get_state_dict(model).values()}.values())  # a tensor held twice moves once
    for t in tensors:
        t.replace(t.to(devices))
    Tensor.realize(*tensors)
    return model
