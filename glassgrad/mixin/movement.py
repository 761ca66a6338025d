"""Tensor methods for movement: reshape, permute, expand, shrink, flip and the views built on them; no copies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.errors import ArgumentError
from glassgrad.helpers import prod
from glassgrad.mixin import symbolic_shapes
from glassgrad.shape import ShapeError, distinct_dims, int_args, shape_arg, unwrapped
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class MovementMixin:
    """Tensor methods for movement: views of the same data, no copies."""

    def _axis(self, axis: int, op: str, ndim: int | None = None) -> int:
        ndim = self.ndim if ndim is None else ndim
        if not -max(ndim, 1) <= axis < max(ndim, 1):
            raise IndexError(f"{op}: dimension {axis} is out of range for a tensor of shape {self.shape} "
                             f"(expected -{max(ndim, 1)} to {max(ndim, 1) - 1})")  # fmt: skip
        return axis % max(ndim, 1)

    def _movement(self, op: Ops, arg: Any) -> Tensor:
        return self._derived(UOp(op, self.dtype, (self.uop,), arg), self)

    def reshape(self, *shape) -> Tensor:
        """The same elements in row-major order, with a new shape; one dimension may be -1."""
        if symbolic_shapes.has_symbolic(sizes := unwrapped(shape)) or symbolic_shapes.has_symbolic(self.shape):
            return symbolic_shapes.reshape(self, sizes)
        shape = shape_arg(shape, "reshape", minus_one="infer", current=self.shape)
        if -1 in shape:
            known = prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                why = f"the other sizes multiply to {known}, which does not divide {self.numel()}"
                if known == 0:
                    why = "-1 is ambiguous where the other sizes multiply to 0"
                raise ShapeError(f"reshape: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                                 f"into {shape}: {why}")  # fmt: skip
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if prod(shape) != self.numel():
            raise ShapeError(f"reshape: cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                             f"into {shape} ({prod(shape)} elements); the element count must not change")  # fmt: skip
        return self if shape == self.shape else self._movement(Ops.RESHAPE, shape)

    def view(self, *shape) -> Tensor:
        """The same as reshape: a view with a new shape."""
        return self.reshape(*shape)

    def permute(self, *order) -> Tensor:
        """Reorder the dimensions: the result's dim i is this tensor's dim order[i]."""
        order = tuple(self._axis(o, "permute") for o in int_args(order, "permute", "dims must be integers"))
        if sorted(order) != list(range(self.ndim)):
            raise ArgumentError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}; "
                                f"name each of 0..{self.ndim - 1} exactly once")  # fmt: skip
        return self if order == tuple(range(self.ndim)) else self._movement(Ops.PERMUTE, order)

    def expand(self, *shape) -> Tensor:
        """Broadcast size-1 dimensions to larger sizes without copying; -1 keeps a dimension."""
        if symbolic_shapes.has_symbolic(sizes := unwrapped(shape)) or symbolic_shapes.has_symbolic(self.shape):
            return symbolic_shapes.expand(self, sizes)
        shape = shape_arg(shape, "expand", minus_one="keep")
        if len(shape) < self.ndim:
            raise ArgumentError(f"expand: the target shape {shape} has fewer dimensions than the tensor {self.shape}")
        if -1 in shape[: len(shape) - self.ndim]:
            raise ShapeError(f"expand: -1 keeps a dimension's size, but {shape} puts one at a new leading dimension")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        new = tuple(old if s == -1 else s for s, old in zip(shape, padded))
        for old, s in zip(padded, new):
            if old != s and old != 1:
                raise ArgumentError(f"expand: cannot expand shape {self.shape} to {shape}: only size-1 dimensions grow")
        x = self.reshape(padded) if padded != self.shape else self
        return x if new == x.shape else x._movement(Ops.EXPAND, new)

    def _broadcast_to(self, shape: tuple[int, ...], op: str) -> Tensor:
        """This tensor broadcast to `shape`, a shape of sizes already (the graph expand builds, without checking a
        user's argument again: every broadcast operand of every op passes here)."""
        if shape == self.shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        if len(shape) < self.ndim or any(old != s and old != 1 for old, s in zip(padded, shape)):
            raise ArgumentError(f"{op}: cannot broadcast shape {self.shape} to {shape}")
        x = self._movement(Ops.RESHAPE, padded) if padded != self.shape else self
        return x if shape == x.shape else x._movement(Ops.EXPAND, shape)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Crop each dimension to [start, end) (None keeps it whole)."""
        if symbolic_shapes.has_symbolic(tuple(arg)) or symbolic_shapes.has_symbolic(self.shape):
            return symbolic_shapes.shrink(self, tuple(arg))
        if len(arg) != self.ndim:
            raise ArgumentError(f"shrink: need one (start, end) per dimension of {self.shape}, got {arg}")
        arg = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
        for (start, end), s in zip(arg, self.shape):
            if not 0 <= start <= end <= s:
                raise ShapeError(f"shrink: range {(start, end)} is outside a dimension of size {s} in {self.shape}")
        if arg == tuple((0, s) for s in self.shape):
            return self
        return self._movement(Ops.SHRINK, arg)

    def flip(self, *axis) -> Tensor:
        """Reverse the order of elements along the given dimensions."""
        axes = set(distinct_dims([self._axis(a, "flip") for a in int_args(axis, "flip", "dims must be integers")],
                                 "flip"))  # fmt: skip
        if not axes:
            return self
        if any(symbolic_shapes.has_symbolic(self.shape[a]) for a in axes):
            shape = symbolic_shapes.shape_text(self.shape)
            raise NotImplementedError(f"flip: dimension {min(axes)} of {shape} is symbolic (a flip would read it "
                                      "from its largest size down); flip a fixed dimension")  # fmt: skip
        return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim)))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dimensions."""
        order = list(range(self.ndim))
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        """The transpose: dimensions in reverse order."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Remove size-1 dimensions (all of them, or only `dim`)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = self._axis(dim, "squeeze")
        if not self.shape or self.shape[dim] != 1:
            return self
        return self.reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dimension at `dim`."""
        dim = self._axis(dim, "unsqueeze", self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dimensions start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
        return self.reshape(self.shape[:start] + (prod(self.shape[start : end + 1]),) + self.shape[end + 1 :])
