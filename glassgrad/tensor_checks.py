"""Values a kernel checks where it computes them: an index within its dimension, an integer divisor that is not zero.

Each marks a tensor with a CHECK node (uop/check.py): the same values, which the kernel that computes them tests as
it goes. A failure raises once the kernels of that realize have run, naming the op, the bad value and the bound, with
the exception class PyTorch raises (IndexError or RuntimeError; ZeroDivisionError or RuntimeError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.uop.check import Check, DivisionByZeroError, IndexOutOfBoundsError
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def out_of_bounds(op: str, dim: int, size: int) -> str:
    """The message of an index outside a dimension, as PyTorch words it, with the op first."""
    return f"{op}: index {{value}} is out of bounds for dimension {dim} with size {size}"


def checked_index(index: Tensor, size: int, message: str, *, negative: bool = False,
                  allowed: int | None = None, broadcast_shape: tuple[int, ...] | None = None) -> Tensor:  # fmt: skip
    """`index`, which must lie in [0, size) (with `negative`, in [-size, size)) or equal `allowed`; `message` is the
    error's text, with {value} for the bad index; `broadcast_shape`: the shape it is broadcast to, if not its own."""
    if allowed is None:
        no_index_into_nothing(index, size, message, broadcast_shape or index.shape)
    return _checked(index, Check(message, index.dtype, -size if negative else 0, size, allowed))


def no_index_into_nothing(index: Tensor, size: int, message: str, shape: tuple[int, ...]) -> None:
    """Every index into a dimension of size 0 is out of bounds, and no kernel would test one (the one-hot sum over no
    elements is 0): raise now, naming the first, where the index broadcast to `shape` holds any. PyTorch's advanced
    indexing raises so whatever the other dimensions select (torch.zeros(0, 0)[:, [1]]); with no index, nothing."""
    if size == 0 and prod(shape) and index.numel():
        raise IndexOutOfBoundsError(message.format(value=index.flatten()[0].item()))


def nonzero_divisor(divisor: Tensor, op: str) -> Tensor:
    """An integer divisor, which must not be 0. A constant one is known now: 0 raises at once (as in PyTorch), any
    other needs no check."""
    if not dtypes.is_int(divisor.dtype):
        return divisor
    message = f"{op}: integer division by zero"
    if (constant := _constant(divisor.uop)) is not None:
        if constant == 0:
            raise DivisionByZeroError(message)
        return divisor
    return _checked(divisor, Check(message, divisor.dtype, nonzero=True))


def _checked(t: Tensor, check: Check) -> Tensor:
    return t._derived(UOp(Ops.CHECK, t.dtype, (t.uop,), check), t)


def _constant(node: UOp) -> int | float | None:
    """The value of every element of a broadcast constant, else None."""
    node = node.base
    return node.arg if node.op is Ops.CONST else None
