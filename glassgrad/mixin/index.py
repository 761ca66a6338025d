"""t[index] and t[index] = value: basic indexing as movement ops, advanced indexing as one-hot gathers and scatters."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes
from glassgrad.errors import ArgumentError
from glassgrad.helpers import prod
from glassgrad.mixin import symbolic_shapes
from glassgrad.mixin.index_forms import as_tuple_index, positions
from glassgrad.mixin.scatter_add import scatter_add, with_scatter_gradient
from glassgrad.mixin.small_tensors import _arange, _bool_ones, _masked_sum, _positions
from glassgrad.tensor_checks import checked_index, out_of_bounds
from glassgrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _inverse(order: list[int]) -> list[int]:
    inverse = [0] * len(order)
    for i, axis in enumerate(order):
        inverse[axis] = i
    return inverse


def _take_every(t: Tensor, dim: int, step: int) -> Tensor:
    """Every `step`-th element along `dim`, starting with the first: pad, split the dim in two, keep column 0."""
    size = t.shape[dim]
    count = -(-size // step)
    padded = t.pad(tuple((0, count * step - size) if i == dim else None for i in range(t.ndim)))
    split = padded.reshape(t.shape[:dim] + (count, step) + t.shape[dim + 1 :])
    first = split.shrink(tuple((0, 1) if i == dim + 1 else None for i in range(split.ndim)))
    return first.reshape(t.shape[:dim] + (count,) + t.shape[dim + 1 :])


def _spread_every(t: Tensor, dim: int, step: int, size: int) -> Tensor:
    """The inverse of _take_every: t's elements `step` apart along `dim` (zeros between), `size` long."""
    count = t.shape[dim]
    column = t.reshape(t.shape[:dim] + (count, 1) + t.shape[dim + 1 :])
    rows = column.pad(tuple((0, step - 1) if i == dim + 1 else None for i in range(column.ndim)))
    flat = rows.reshape(t.shape[:dim] + (count * step,) + t.shape[dim + 1 :])
    return flat.shrink(tuple((0, size) if i == dim else None for i in range(flat.ndim)))


def _leaves(nested: Any) -> list[Any]:
    if isinstance(nested, (list, tuple)):
        return [v for item in nested for v in _leaves(item)]
    return [nested]


def _is_bool_list(item: Any) -> bool:
    values = _leaves(item)
    return bool(values) and all(isinstance(v, bool) for v in values)


def _nested_depth(item: Any) -> int:
    if not isinstance(item, (list, tuple)):
        return 0
    return 1 + _nested_depth(item[0]) if item else 1


def _normalize_item(t: Tensor, item: Any) -> Any:
    """One element of an index as None, ..., bool, int, slice, list or Tensor."""
    if item is None or item is Ellipsis or isinstance(item, (bool, int, slice, list)):
        return item
    if isinstance(item, tuple):
        return list(item)
    if isinstance(item, IndexMixin):
        if item.dtype != dtypes.bool and not dtypes.is_int(item.dtype):
            raise IndexError(f"index: tensors used as indices must be integer or bool tensors, got {item.dtype}")
        if item.device != t.device:
            raise IndexError(f"index: the index tensor is on {item.device} but the tensor is on {t.device}")
        return bool(item.item()) if item.ndim == 0 and item.dtype == dtypes.bool else item
    if hasattr(item, "__array_interface__"):
        return _normalize_item(t, type(t)(item, device=t.device))
    if hasattr(item, "__index__"):
        return operator.index(item)
    raise IndexError(f"index: {item!r} of type {type(item).__name__} is not a valid index; use ints, slices, None, "
                     "..., lists, or integer or bool tensors")  # fmt: skip


def _dims_used(item: Any) -> int:
    """How many dims of the tensor an index element consumes."""
    if isinstance(item, IndexMixin) and item.dtype == dtypes.bool:
        return item.ndim
    if isinstance(item, list) and _is_bool_list(item):
        return _nested_depth(item)
    return 0 if item is None or item is Ellipsis or isinstance(item, bool) else 1


def _list_index(t: Tensor, item: list, dim: int) -> Tensor:
    """A list in an index: of bools a mask, of ints positions (checked here, since they are known on the host)."""
    if _is_bool_list(item):
        return type(t)(item, device=t.device, dtype=dtypes.bool)
    item = positions(item, type(t))
    values = _leaves(item)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise IndexError(f"index: a list index must hold only ints or only bools, got {item!r}")
    for v in values:
        if not -t.shape[dim] <= v < t.shape[dim]:
            raise IndexError(f"index: index {v} is out of bounds for dimension {dim} with size {t.shape[dim]}")
    return type(t)(item, device=t.device, dtype=dtypes.int32) if values else _positions(t, [])


def _mask_coordinates(t: Tensor, mask: Tensor, dim: int) -> list[Tensor]:
    """The coordinates of the true elements of a bool mask over dims dim.. of t: realizes the mask to count them."""
    covered = t.shape[dim : dim + mask.ndim]
    if mask.shape != covered:
        raise IndexError(f"index: the mask has shape {mask.shape} but the dims it indexes have {covered} (tensor "
                         f"shape {t.shape}, from dimension {dim})")  # fmt: skip
    coords: list[list[int]] = [[] for _ in mask.shape]
    for flat, selected in enumerate(mask.flatten().tolist()):
        if not selected:
            continue
        for k in reversed(range(mask.ndim)):
            coords[k].append(flat % mask.shape[k])
            flat //= mask.shape[k]
    return [_positions(t, c) for c in coords]


def _parse_index(t: Tensor, index: Any) -> tuple[list[Any], list[tuple[int, Tensor]]]:
    """The basic part of an index (one int, slice or None per dim of t) and the advanced part.

    The advanced part is a list of (dim of the basic result, integer index tensor). As in PyTorch, ints are basic
    (they select before advanced indexing), a bool mask becomes the coordinates of its true elements, and a Python
    bool is None paired with an index of [0] (True) or [] (False).
    """
    index = as_tuple_index(index, type(t))
    items = [_normalize_item(t, i) for i in (index if isinstance(index, tuple) else (index,))]
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("index: an index can only have a single ellipsis ('...')")
    used = sum(_dims_used(i) for i in items)
    if used > t.ndim:
        raise IndexError(f"index: too many indices for a tensor of dimension {t.ndim} (shape {t.shape}): got {used}")
    if any(i is Ellipsis for i in items):  # `is`, since `in` would compare tensors elementwise
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items = items[:at] + [slice(None)] * (t.ndim - used) + items[at + 1 :]
    has_tensor = any(isinstance(i, (IndexMixin, list)) for i in items)
    basic: list[Any] = []
    advanced: list[tuple[int, Tensor]] = []
    dim = position = 0  # the next dim of t, and of the basic result
    for item in items:
        if item is None or isinstance(item, bool):
            if isinstance(item, bool) and (has_tensor or not item):
                advanced.append((position, _positions(t, [0] if item else [])))
            basic.append(None)
            position += 1
        elif isinstance(item, int):
            if not -t.shape[dim] <= item < t.shape[dim]:
                raise IndexError(f"index: index {item} is out of bounds for dimension {dim} with size {t.shape[dim]}")
            basic.append(item)
            dim += 1
        elif isinstance(item, slice):
            if item.step == 0:
                raise ArgumentError("index: slice step cannot be zero")
            basic.append(item)
            dim, position = dim + 1, position + 1
        else:
            tensor = _list_index(t, item, dim) if isinstance(item, list) else item
            is_mask = tensor.dtype == dtypes.bool
            for coords in _mask_coordinates(t, tensor, dim) if is_mask else [tensor]:
                advanced.append((position, coords))
                basic.append(slice(None))
                position += 1
            dim += tensor.ndim if is_mask else 1
    return basic + [slice(None)] * (t.ndim - dim), advanced


class _BasicPlan:
    """t[ints, slices, None] as crop, flip, take every step-th, reshape; `place` runs it backwards."""

    def __init__(self, shape: tuple[int, ...], basic: list[Any]):
        self.shape = shape
        self.crops: list[tuple[int, int]] = []
        self.flips: list[int] = []
        self.steps: list[int] = []
        self.final_shape: list[int] = []
        for item in basic:
            if item is None:
                self.final_shape.append(1)
                continue
            size = shape[len(self.crops)]
            if isinstance(item, int):
                self.crops.append((item % size, item % size + 1))
                self.steps.append(1)
                continue
            start, stop, step = item.indices(size)
            count = len(range(start, stop, step))
            low = start if step > 0 else start + (count - 1) * step
            self.flips += [len(self.crops)] if step < 0 else []
            self.crops.append((low, low + (count - 1) * abs(step) + 1) if count else (0, 0))
            self.steps.append(abs(step))
            self.final_shape.append(count)

    def _strided(self, dim: int) -> bool:
        low, high = self.crops[dim]
        return self.steps[dim] > 1 and high - low > 1

    def apply(self, t: Tensor) -> Tensor:
        x = t.shrink(tuple(self.crops)) if t.ndim else t
        x = x.flip(*self.flips) if self.flips else x
        for d, step in enumerate(self.steps):
            x = _take_every(x, d, step) if self._strided(d) else x
        return x.reshape(tuple(self.final_shape))

    def place(self, v: Tensor) -> Tensor:
        """v (of the indexed shape) where it came from in a tensor of the full shape; zeros elsewhere."""
        stepped = tuple(-(-(high - low) // s) if self._strided(d) else high - low
                        for d, ((low, high), s) in enumerate(zip(self.crops, self.steps, strict=True)))  # fmt: skip
        x = v.reshape(stepped)
        for d, step in enumerate(self.steps):
            x = _spread_every(x, d, step, self.crops[d][1] - self.crops[d][0]) if self._strided(d) else x
        x = x.flip(*self.flips) if self.flips else x
        return x.pad(tuple((low, s - high) for (low, high), s in zip(self.crops, self.shape, strict=True)))


class _AdvancedIndex:
    """Index tensors into the dims `positions` of a tensor of `shape`, broadcast together into one flat position.

    Positions outside a dim raise when the kernel has run (tensor_checks.py); they select nothing, so a write that
    raises writes nowhere. Index lists known on the host are checked when the index is parsed.
    """

    def __init__(self, shape: tuple[int, ...], advanced: list[tuple[int, Tensor]]):
        self.positions = [p for p, _ in advanced]
        self.sizes = [shape[p] for p in self.positions]
        self.kept = [d for d in range(len(shape)) if d not in self.positions]
        self.kept_shape = tuple(shape[d] for d in self.kept)
        self.index_shape = _broadcast_index_shapes([i.shape for _, i in advanced])
        self.total = prod(self.sizes)
        flat, inside = None, None
        for (position, idx), size in zip(advanced, self.sizes, strict=True):
            idx = checked_index(
                idx, size, out_of_bounds("index", position, size), negative=True, broadcast_shape=self.index_shape
            )
            idx = idx.expand(self.index_shape)
            idx = (idx < 0).where(idx + size, idx)  # negative positions count from the end, as in PyTorch
            fits = (idx >= 0) & (idx < size)
            flat, inside = (idx, fits) if flat is None else (flat * size + idx, inside & fits)
        self.flat = inside.where(flat, -1)
        # the result's dims: the index dims replace the indexed ones where those are adjacent, else they go first
        adjacent = self.positions == list(range(self.positions[0], self.positions[0] + len(self.positions)))
        at = self.positions[0] if adjacent else 0
        kept, indexed = len(self.kept), len(self.index_shape)
        self.result_order = list(range(at)) + [kept + i for i in range(indexed)] + list(range(at, kept))
        self.result_shape = tuple((self.kept_shape + self.index_shape)[i] for i in self.result_order)

    def gather(self, y: Tensor) -> Tensor:
        # the sum is built in the result's order, the picked-from axis last: its kernel then stores the result as it
        # lies (x[samples] of MNIST images: each image's 784 pixels in a row, not the batch innermost)
        order, kept = self.result_order + [len(self.result_order)], len(self.kept)
        lined_up = y.permute(self.kept + self.positions).reshape(
            self.kept_shape + (1,) * len(self.index_shape) + (self.total,)).permute(order)  # fmt: skip
        onehot = self.flat.unsqueeze(-1) == _arange(self.total, y)
        onehot = onehot.reshape((1,) * kept + self.index_shape + (self.total,)).permute(order)
        return with_scatter_gradient(
            _masked_sum(onehot, lined_up, -1), y, prod(self.index_shape), self._scatter_gradient
        )

    def _scatter_gradient(self, g: Tensor, y: Tensor) -> Tensor:
        """gather's gradient: g (of the result's shape) added into zeros of y's shape where the index read (a place
        read twice gets both), by a scatter-add along the flat position of the indexed dims."""
        n = prod(self.index_shape)
        values = g.permute(_inverse(self.result_order)).reshape(self.kept_shape + (n,))
        places = self.flat.reshape((1,) * len(self.kept) + (n,)).expand(values.shape)
        zeros = type(y).zeros(self.kept_shape + (self.total,), dtype=y.dtype, device=y.device)
        added = scatter_add(zeros, len(self.kept), places, values).reshape(self.kept_shape + tuple(self.sizes))
        return added.permute(_inverse(self.kept + self.positions))

    def place(self, value: Tensor, y_shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """value (of the result's shape) where the index puts it in a tensor of y_shape, and a mask of the places."""
        n = prod(self.index_shape)
        values = value.permute(_inverse(self.result_order)).reshape(self.kept_shape + (n, 1))
        entry = _arange(n, value).reshape(n, 1)
        names = self.flat.reshape(n, 1) == _arange(self.total, value).reshape(1, self.total)
        # where several entries name the same place the last one is written (as PyTorch on the CPU)
        winner = names.where(entry, -1).max(0, keepdim=True)
        placed = _masked_sum(entry == winner, values, -2).reshape(self.kept_shape + tuple(self.sizes))
        written = (winner >= 0).reshape(tuple(y_shape[d] if d in self.positions else 1 for d in range(len(y_shape))))
        return placed.permute(_inverse(self.kept + self.positions)), written.expand(y_shape)


def _broadcast_index_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        sizes = {s[d - ndim + len(s)] for s in shapes if d - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise IndexError(f"index: index tensors of shapes {', '.join(map(str, shapes))} cannot be broadcast "
                             "together")  # fmt: skip
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _as_value(value: Any, t: Tensor, op: str) -> Tensor:
    if isinstance(value, IndexMixin):
        if value.device != t.device:
            raise ArgumentError(f"{op}: value is on {value.device} but the tensor is on {t.device}")
        return value.cast(t.dtype)
    if not isinstance(value, (bool, int, float, list, tuple)) and not hasattr(value, "__array_interface__"):
        raise TypeError(f"{op}: value must be a tensor, a number or a nested list, got {type(value).__name__}")
    return type(t)(value, device=t.device, dtype=t.dtype)


def _without_leading_ones(value: Tensor, ndim: int) -> Tensor:
    while value.ndim > ndim and value.shape[0] == 1:
        value = value.reshape(value.shape[1:])
    return value


def _fit_value(value: Tensor, shape: tuple[int, ...], op: str) -> Tensor:
    """value broadcast to shape; extra leading size-1 dims are dropped first, as in PyTorch."""
    try:
        return _without_leading_ones(value, len(shape)).expand(shape)
    except ValueError:
        message = f"{op}: value of shape {value.shape} cannot be broadcast to the indexed shape {shape}"
        raise ArgumentError(message) from None


def _mask_write(old: Tensor, index: Any, value: Tensor) -> Tensor | None:
    """x[mask] = value, for a mask over leading dims and a value that needs no count: where(mask, value, x).

    None when the write is not of that form (the general path then realizes the mask to count its elements).
    """
    mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    if not isinstance(mask, IndexMixin) or mask.dtype != dtypes.bool or not 1 <= mask.ndim <= old.ndim:
        return None
    rest = old.shape[mask.ndim :]
    if mask.shape != old.shape[: mask.ndim] or _without_leading_ones(value, 0).ndim > len(rest):
        return None
    fitted = _fit_value(value, rest, "setitem")
    return mask.reshape(mask.shape + (1,) * len(rest)).where(fitted, old)


def _indexed_write(old: Tensor, index: Any, value: Tensor) -> Tensor | None:
    """old with value written at old[index]; None when the index selects nothing."""
    basic, advanced = _parse_index(old, index)
    plan = _BasicPlan(old.shape, basic)
    y_shape = tuple(plan.final_shape)
    selection = _AdvancedIndex(y_shape, advanced) if advanced else None
    value = _fit_value(value, selection.result_shape if selection else y_shape, "setitem")
    if value.numel() == 0:
        return None
    placed, written = selection.place(value, y_shape) if selection else (value, _bool_ones(y_shape, old))
    return plan.place(written).where(plan.place(placed), old)


def _has_storage(node: UOp) -> bool:
    """A buffer, a view of one, or a pending write into one: something setitem can write into in place."""
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op in (Ops.BUFFER, Ops.ASSIGN)


class IndexMixin:
    """t[index] and t[index] = value."""

    def __getitem__(self, index: Any) -> Tensor:
        """t[index] as in PyTorch: ints, slices, None, ..., int tensors and lists, bool masks (realized to count)."""
        if symbolic_shapes.symbolic_index(self, index):  # t[:, :i] with a bound Variable i
            return symbolic_shapes.sliced(self, index)
        basic, advanced = _parse_index(self, index)
        viewed = _BasicPlan(self.shape, basic).apply(self)
        return _AdvancedIndex(viewed.shape, advanced).gather(viewed) if advanced else viewed

    def __setitem__(self, index: Any, value: Any) -> None:
        """t[index] = value: written lazily into this tensor's buffer (or into its graph while it has none)."""
        value_requires_grad = isinstance(value, IndexMixin) and value.requires_grad
        grad = not type(self).no_grad and bool(self.requires_grad or value_requires_grad)
        if grad and self.requires_grad and self._is_leaf:
            raise RuntimeError("setitem: this tensor is a leaf that requires grad and cannot be written in place; "
                               "write into a clone(), or inside `with Tensor.no_grad():`")  # fmt: skip
        # what to update: for autograd the graph that built this tensor, else what stands for it now
        old = self._derived(self._autograd_root(), self) if grad else type(self)(self._current_uop())
        value = _as_value(value, self, "setitem")
        new = _mask_write(old, index, value)
        new = _indexed_write(old, index, value) if new is None else new
        if new is None:  # the index selects nothing
            return
        if not grad and _has_storage(old.uop):
            self.assign(new)  # into a view of another tensor's buffer, assign writes at once
            return
        self._set_uop(new.uop)  # through _set_uop: every change of a tensor's node is tracked (engine/lazy.py)
        self._autograd_uop = None
        if grad:
            self._requires_grad, self._is_leaf = True, False
