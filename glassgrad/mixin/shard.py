"""Tensor methods for tensors split across several devices: shard, shard_ (uop/multi.py says how ops run on them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from glassgrad.device_info import canonical, check_known
from glassgrad.errors import ArgumentError
from glassgrad.mixin.elementwise import check_device_holds
from glassgrad.uop.multi import check_split, copy_to, multi, resharded, split_axis
from glassgrad.uop.ops import Ops, UOp, fresh_unique

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class ShardMixin:
    """Tensor methods for tensors split across several devices."""

    def shard(self: Tensor, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor split along `axis` into equal parts, one on each device (axis None: a full copy on each);
        its `device` is then the tuple of devices, and every op on it runs on each part."""
        devices = _device_tuple(devices)
        if axis is not None and self.ndim == 0:
            raise ArgumentError(f"shard: a 0-d tensor has no dimension {axis} to split; use axis=None to copy it")
        axis = None if axis is None else self._axis(axis, "shard")
        check_split(self.shape, axis, devices)
        check_device_holds(devices, self.dtype)
        if isinstance(self.device, tuple):  # split otherwise, or elsewhere: from a gathered copy
            if self.device == devices:
                return self._derived(resharded(self.uop, axis), self)
            return self.to(devices[0]).shard(devices, axis)
        size = 0 if axis is None else self.shape[axis] // len(devices)
        parts = []
        for i, device in enumerate(devices):
            part = self.uop
            if axis is not None:
                span = tuple((i * size, (i + 1) * size) if a == axis else (0, n) for a, n in enumerate(self.shape))
                part = UOp(Ops.SHRINK, self.dtype, (part,), span)
            # each part a buffer of its own: an assign to a shard must not write into this tensor
            parts.append(copy_to(UOp(Ops.CONTIGUOUS, self.dtype, (part, fresh_unique())), device))
        return self._derived(multi(parts, axis), self)

    def shard_(self: Tensor, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """shard in place: this tensor (a model's weight, say) now lives split over `devices`."""
        self._set_uop(self.shard(devices, axis).uop)
        return self

    def _split_like(self: Tensor, other: Tensor) -> Tensor:
        """`other` (of this shape, on this tensor's devices) split as this tensor is: a new tensor of zeros or
        random values takes the split of the one it is made like."""
        if not isinstance(self.device, tuple) or other.device != self.device:
            return other
        axis = split_axis(self.uop)
        return other if axis is None else other._derived(resharded(other.uop, axis), other)


def _device_tuple(devices: Sequence[str]) -> tuple[str, ...]:
    if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
        raise ArgumentError(f"shard: devices must be a tuple of device names, got {devices!r}")
    names = canonical(tuple(devices))
    for name in names:
        if names.count(name) > 1:
            raise ArgumentError(f"shard: device {name} appears twice in {names}; each shard needs a device of its own")
        check_known(name)
    return names
