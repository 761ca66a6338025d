"""Movement with symbolic sizes (uop/variable.py): shrink, indexing, reshape, expand and pad where a size is a bound
Variable or a sum of one and ints (`t[:, :i]`, `cache.shrink(((0, pos + 1), None))`).

A symbolic dim is cut from a dim of fixed size at 0 (its end symbolic), kept whole through reshapes (sizes of 1
around it, other dims merged or split beside it), broadcast from 1, reduced, padded back to a fixed size (a crop's
gradient), or cropped back to an int (the reshape tinygrad's users write to read a result: `out.reshape(3, i)` of a
(3, i) shape). What kernels cannot run for every value of the variable at once is a NotImplementedError that says
so, never a program for one value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.helpers import prod
from glassgrad.shape import ShapeError
from glassgrad.uop.ops import Ops, UOp, render_sint, size_sum
from glassgrad.uop.variable import sym_bounds, sym_value

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def has_symbolic(sizes: Any) -> bool:
    """Whether a shape (or a shrink's pairs) holds a symbolic size."""
    if isinstance(sizes, (tuple, list)):
        return any(has_symbolic(s) for s in sizes)
    return isinstance(sizes, UOp)


def _checked(size: Any, op: str) -> Any:
    if isinstance(size, UOp):
        if size.dtype.count != 1 or size.dtype.name not in ("int", "int32"):
            raise TypeError(f"{op}: a symbolic size must be an int expression of Variables, got {render_sint(size)}")
        return size
    if not isinstance(size, int) or isinstance(size, bool):
        raise ValueError(f"{op}: sizes must be ints or bound Variables, got {type(size).__name__} {size!r}")
    return size


def _name(size: Any) -> str:
    return render_sint(size) if isinstance(size, UOp) else str(size)


def shape_text(shape: tuple) -> str:
    """A shape for an error message: (3, i=4)."""
    return f"({', '.join(_name(s) for s in shape)}{',' if len(shape) == 1 else ''})"


def shrink(x: Tensor, arg: tuple) -> Tensor:
    """x cropped to [start, end) per dim where an end (or a size) is symbolic."""
    if len(arg) != x.ndim:
        raise ShapeError(f"shrink: need one (start, end) per dimension of {shape_text(x.shape)}, got {arg}")
    pairs = tuple((0, s) if a is None else (_checked(a[0], "shrink"), _checked(a[1], "shrink"))
                  for a, s in zip(arg, x.shape))  # fmt: skip
    for (start, end), size in zip(pairs, x.shape):
        _check_crop(start, end, size)
    if all(p[0] == 0 and p[1] is s for p, s in zip(pairs, x.shape)):
        return x
    return x._movement(Ops.SHRINK, pairs)


def _check_crop(start: Any, end: Any, size: Any) -> None:
    where = f"range ({_name(start)}, {_name(end)}) of a dimension of size {_name(size)}"
    if isinstance(start, UOp):
        raise NotImplementedError(f"shrink: {where}: a symbolic start is not supported (kernels lay a symbolic dim "
                                  "out from 0); crop from 0 to a symbolic end")  # fmt: skip
    if isinstance(end, UOp):
        if end is size:
            return
        if start != 0 or isinstance(size, UOp):
            raise NotImplementedError(f"shrink: {where}: a symbolic end is supported from 0 of a dimension of fixed "
                                      "size only")  # fmt: skip
        low, high = sym_bounds(end)
        if low < 0 or high > size:
            raise ShapeError(f"shrink: {where}: the end takes values {low}..{high} over its Variables' ranges, "
                             f"outside 0..{size}; give the Variable a range that fits")  # fmt: skip
        return
    limit = sym_value(size) if isinstance(size, UOp) else size  # an int crop of a symbolic dim: of its value now
    if not 0 <= start <= end <= limit:
        raise ShapeError(f"shrink: {where} (now {limit}) is outside it (need 0 <= start <= end <= size)")


def reshape(x: Tensor, shape: tuple) -> Tensor:
    """x with a new shape where either shape holds a symbolic size: symbolic dims stay whole, in order, and the
    fixed dims between them keep their products; a symbolic dim may become the int it is now (a crop)."""
    shape = tuple(_checked(s, "reshape") for s in shape)
    if len(shape) == x.ndim and all(_same_or_now(old, new) for old, new in zip(x.shape, shape)):
        if shape == x.shape:
            return x
        cropped = shrink(x, tuple((0, new) if isinstance(old, UOp) and old is not new else None
                                  for old, new in zip(x.shape, shape)))  # fmt: skip
        return cropped if cropped.shape == shape else cropped._movement(Ops.RESHAPE, shape)
    if any(isinstance(s, int) and s < 0 for s in shape):
        raise NotImplementedError(f"reshape: -1 with a symbolic shape: name every size of {shape_text(shape)}")
    if _segments(x.shape) != _segments(shape):
        raise NotImplementedError(f"reshape: {shape_text(x.shape)} to {shape_text(shape)}: a symbolic dim must stay a "
                                  "dim of its own, in order, with the fixed sizes between symbolic dims keeping their "
                                  "products (kernels lay a symbolic dim out at its largest)")  # fmt: skip
    return x._movement(Ops.RESHAPE, shape)


def _same_or_now(old: Any, new: Any) -> bool:
    """Whether `new` is the size `old` (or, for a symbolic `old` and an int `new`, the value `old` has now)."""
    if old is new or (not isinstance(old, UOp) and not isinstance(new, UOp) and old == new):
        return True
    return isinstance(old, UOp) and not isinstance(new, UOp) and sym_value(old) == new


def _segments(shape: tuple) -> list:
    """The symbolic sizes of a shape in order, with the product of the fixed sizes before, between and after."""
    parts, run = [], []
    for s in shape:
        if isinstance(s, UOp):
            parts += [prod(run), s]
            run = []
        else:
            run.append(s)
    return [*parts, prod(run)]


def expand(x: Tensor, shape: tuple) -> Tensor:
    """x broadcast to `shape` where it holds a symbolic size (-1 or None keeps a size)."""
    shape = tuple(-1 if s is None else _checked(s, "expand") for s in shape)
    if len(shape) < x.ndim:
        raise ShapeError(
            f"expand: the target shape {shape_text(shape)} has fewer dimensions than {shape_text(x.shape)}"
        )
    padded = (1,) * (len(shape) - x.ndim) + x.shape
    new = tuple(old if isinstance(s, int) and s == -1 else s for s, old in zip(shape, padded))
    for old, s in zip(padded, new):
        if old is not s and not (isinstance(old, int) and old == 1) and not (isinstance(old, int) and old == s):
            raise ShapeError(f"expand: cannot expand shape {shape_text(x.shape)} to {shape_text(shape)}: only "
                             "size-1 dimensions grow")  # fmt: skip
    y = reshape(x, padded) if padded != x.shape else x
    return y if new == y.shape else y._movement(Ops.EXPAND, new)


def pad(x: Tensor, arg: Any, mode: str = "constant", value: float | None = None) -> Tensor:
    """x padded with zeros where a size is symbolic: a symbolic dim only back to a fixed size (the gradient of a
    symbolic crop), from ints before it; other dims by ints."""
    pairs = tuple((0, 0) if p is None else (_checked(p[0], "pad"), _checked(p[1], "pad")) for p in arg)
    if len(pairs) != x.ndim or mode != "constant" or value:
        raise NotImplementedError(f"pad: with a symbolic size, give one (before, after) pair per dimension of "
                                  f"{shape_text(x.shape)} and pad with zeros (mode 'constant')")  # fmt: skip
    for (before, after), size in zip(pairs, x.shape):
        grown = size_sum(size, before, after)
        if isinstance(before, UOp) or (isinstance(before, int) and before < 0) or (isinstance(grown, UOp) and
                                                                                   grown is not size):  # fmt: skip
            raise NotImplementedError(
                f"pad: ({_name(before)}, {_name(after)}) of a dimension of size {_name(size)}: "
                "a symbolic size pads back to a fixed size only, from an int before it"
            )
        if isinstance(grown, int) and (grown < sym_bounds(size)[1] + before or sym_bounds(after)[0] < 0):
            raise ShapeError(f"pad: ({_name(before)}, {_name(after)}) of a dimension of size {_name(size)} would "
                             "crop it for some values of its Variables")  # fmt: skip
    return x if all(p == (0, 0) for p in pairs) else x._movement(Ops.PAD, pairs)


def symbolic_index(x: Tensor, index: Any) -> bool:
    """Whether x[index] involves a symbolic size: a slice with a symbolic bound (t[:, :i]), or x's shape."""
    items = index if isinstance(index, tuple) else (index,)
    return has_symbolic(x.shape) or any(isinstance(i, slice) and has_symbolic((i.start, i.stop, i.step)) for i in items)


def sliced(x: Tensor, index: Any) -> Tensor:
    """x[index] for an index of ints, slices from 0, None and `...` where a size or a slice's stop is symbolic
    (x[:, :i], x[0][:, :i], x[:, None])."""
    items = list(index if isinstance(index, tuple) else (index,))
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("index: an index can only have a single ellipsis ('...')")
    if any(not (isinstance(i, (slice, int)) or i is Ellipsis or i is None) or isinstance(i, bool) for i in items):
        raise NotImplementedError("index: with a symbolic size, an index may hold ints, slices, None and '...' only")
    used = sum(i is not None and i is not Ellipsis for i in items)
    if used > x.ndim:
        raise IndexError(f"index: too many indices for a tensor of shape {shape_text(x.shape)}: got {used}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - used)
    items += [slice(None)] * (x.ndim - used - (Ellipsis in items))
    pairs, kept = [], []  # the crop of each dim of x; the result's dims: a dim of x kept, or None for a new one
    for item in items:
        if item is None:
            kept.append(None)
            continue
        size = x.shape[len(pairs)]
        if isinstance(item, int):
            if isinstance(size, UOp) or not -size <= item < size:
                raise IndexError(f"index: index {item} is out of bounds for a dimension of size {_name(size)}")
            pairs.append((item % size, item % size + 1))
            continue
        if item.step not in (None, 1):
            raise NotImplementedError(f"index: a slice with step {_name(item.step)} beside a symbolic size")
        start = 0 if item.start is None else item.start
        stop = size if item.stop is None else item.stop
        if isinstance(start, int) and start < 0 or isinstance(stop, int) and stop < 0:
            raise NotImplementedError("index: negative bounds beside a symbolic size; write them from 0")
        pairs.append((start, stop))
        kept.append(len(pairs) - 1)
    cropped = shrink(x, tuple(pairs))
    final = tuple(1 if d is None else cropped.shape[d] for d in kept)
    return cropped if final == cropped.shape else reshape(cropped, final)
