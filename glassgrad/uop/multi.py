"""Tensors split across several devices: the graph of ops on sharded tensors, lowered to one graph per device.

A sharded tensor's graph is built like any other, over `MULTI(shard_0, ..., shard_k-1)` nodes (arg: the axis split
evenly across the devices, or None for a full copy on each) whose shape is the whole tensor's and whose device is
the tuple of the shards' devices; autograd differentiates that graph as it is. Before kernelize, `lower_multi`
rewrites it bottom-up into a MULTI of single-device graphs, one per device, whose kernels then run as usual:
- elementwise ops run per shard, an operand with another split first made to match the result's;
- movement ops that keep each shard's elements together run per shard (the split axis may move: a permute, a
  reshape that keeps it whole); the others (a pad, shrink or flip of the split axis, a reshape that merges it with
  the axes before it) gather the shards onto every device first;
- a reduction over the split axis reduces each shard, then sums (or maxes) the partial results of every device on
  each device, in the same order (an all-reduce by copies);
- COPY to one device gathers the shards there; COPY to a tuple of devices copies to each.
"""

from __future__ import annotations

from collections.abc import Callable

from glassgrad.dtype import dtypes, truncate
from glassgrad.errors import ArgumentError
from glassgrad.helpers import prod
from glassgrad.uop.opcodes import GroupOp, Ops
from glassgrad.uop.ops import UOp, device_node, several_devices

Devices = tuple[str, ...]


def multi(shards: list[UOp], axis: int | None) -> UOp:
    """The tensor made of `shards` (one per device, each of one shape), split along `axis` (None: copies)."""
    several_devices["seen"] = True
    return UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis)


def select(x: UOp, i: int, axis: int | None) -> UOp:
    """The i-th shard of `x` split along `axis`, on `x`'s i-th device."""
    return UOp(Ops.MSELECT, x.dtype, (x,), (i, axis))


def resharded(x: UOp, axis: int | None) -> UOp:
    """`x` (a graph on a tuple of devices) split along `axis` instead, as a node autograd can walk through."""
    return multi([select(x, i, axis) for i in range(len(x.device))], axis)


def with_zeros(g: UOp, i: int, devices: Devices, axis: int | None) -> UOp:
    """A tensor split along `axis` over `devices` whose i-th shard is `g` and every other one zeros (MSELECT's
    gradient)."""

    def zeros(device: str) -> UOp:
        zero = UOp(Ops.CONST, g.dtype, (device_node(device),), truncate(g.dtype, 0))
        return UOp(Ops.EXPAND, g.dtype, (UOp(Ops.RESHAPE, g.dtype, (zero,), (1,) * len(g.shape)),), g.shape)

    return multi([g if j == i else zeros(d) for j, d in enumerate(devices)], axis)


def split_axis(node: UOp) -> int | None:
    """The axis a graph on several devices is split along, as lowering finds it (None: full copies)."""
    return lower_multi(node).arg if isinstance(node.device, tuple) else None


def check_split(shape: tuple[int, ...], axis: int | None, devices: Devices, op: str = "shard") -> None:
    """An ArgumentError unless `axis` of `shape` splits evenly over the devices (tinygrad's rule: no uneven shards)."""
    if axis is not None and shape[axis] % len(devices):
        raise ArgumentError(f"{op}: dimension {axis} of shape {shape} has size {shape[axis]}, which does not split "
                            f"evenly over the {len(devices)} devices {devices}; pad it to a multiple of "
                            f"{len(devices)} or shard another axis")  # fmt: skip


# ---- lowering ----


def lower_multi(root: UOp) -> UOp:
    """The graph with every op on several devices rewritten into a MULTI of one graph per device."""
    if not several_devices["seen"]:
        return root
    new: dict[UOp, UOp] = {}
    for node in root.toposort():
        src = tuple(new[s] for s in node.src)
        if node.op is not Ops.DEVICE and any(_on_devices(s) for s in src):
            new[node] = _lower(node, src)
        else:
            new[node] = node if src == node.src else node.replace(src=src)
    return new[root]


def _on_devices(node: UOp) -> bool:
    return node.op is Ops.MULTI or (node.op is Ops.DEVICE and isinstance(node.arg, tuple))


def _lower(node: UOp, src: tuple[UOp, ...]) -> UOp:
    """One node over lowered sources: a MULTI (or, for a COPY to one device or an MSELECT, one device's graph)."""
    if (devices := next((s.arg for s in src if s.op is Ops.DEVICE and isinstance(s.arg, tuple)), None)) is not None:
        if node.op is Ops.COPY and src[0].op is Ops.MULTI:
            return src[0] if src[0].device == devices else multi([gather(src[0], d) for d in devices], None)
        return multi([node.replace(src=tuple(device_node(d) if s.op is Ops.DEVICE else s for s in src))
                      for d in devices], None)  # fmt: skip
    if node.op is Ops.COPY:
        return gather(src[0], node.device)
    if node.op is Ops.MSELECT:
        return _reshard(src[0], node.arg[1]).src[node.arg[0]]
    _check_devices(node, src)
    if node.op is Ops.REDUCE_AXIS:
        return _reduce(node, src[0])
    if node.op in GroupOp.Movement:
        return _movement(node, src[0])
    if node.op is Ops.SCATTER_ADD:
        return _once_then_copied(node, src)
    if node.op is Ops.ASSIGN:  # into the target's own shards
        axis = src[0].arg
    else:
        axis = next((s.arg for s in src if s.op is Ops.MULTI and s.arg is not None), None)
    return _per_shard(node, [_reshard(s, axis) if s.op is Ops.MULTI else s for s in src], axis)


def _check_devices(node: UOp, src: tuple[UOp, ...]) -> None:
    devices = [s.device for s in src if s.device is not None and s.op is not Ops.DEVICE]
    if any(d != devices[0] for d in devices):
        raise ArgumentError(f"{node.op.name.lower()}: tensors are on different devices: "
                            f"{' and '.join(str(d) for d in dict.fromkeys(devices))}; move one with .to() or "
                            ".shard()")  # fmt: skip


def _once_then_copied(node: UOp, src: tuple[UOp, ...]) -> UOp:
    """`node` on whole copies of its sources on the first device, its result copied to the others. For a scatter-add:
    base, index and source may differ in size along any axis, and its atomics add in any order on a GPU, so a device
    computing its own would hold a replica an ulp apart from the others'."""
    devices = [s.device for s in next(s for s in src if s.op is Ops.MULTI).src]
    first = node.replace(src=tuple(gather(s, devices[0]) if s.op is Ops.MULTI else s for s in src))
    return multi([copy_to(first, d) for d in devices], None)


def _per_shard(node: UOp, src: list[UOp], axis: int | None) -> UOp:
    count = len(next(s for s in src if s.op is Ops.MULTI).src)
    shards = [node.replace(src=tuple(s.src[i] if s.op is Ops.MULTI else s for s in src)) for i in range(count)]
    return multi(shards, axis)


def _reshard(x: UOp, axis: int | None) -> UOp:
    """The MULTI `x` split along `axis`: gathered where it is split otherwise, each device's part kept."""
    if x.arg == axis:
        return x
    whole = x if x.arg is None else multi([gather(x, s.device) for s in x.src], None)
    if axis is None:
        return whole
    size = x.shape[axis] // len(x.src)
    return multi([_shrink_axis(s, axis, i * size, (i + 1) * size) for i, s in enumerate(whole.src)], axis)


def _shrink_axis(x: UOp, axis: int, start: int, end: int) -> UOp:
    arg = tuple((start, end) if i == axis else (0, n) for i, n in enumerate(x.shape))
    return UOp(Ops.SHRINK, x.dtype, (x,), arg)


def copy_to(x: UOp, device: str) -> UOp:
    """`x` (on one device) on `device`: a COPY of its elements in order, shaped as it was."""
    if x.device == device:
        return x
    flat = x if len(x.shape) == 1 else UOp(Ops.RESHAPE, x.dtype, (x,), (prod(x.shape),))
    copy = UOp(Ops.COPY, x.dtype, (flat, device_node(device)))
    return copy if len(x.shape) == 1 else UOp(Ops.RESHAPE, x.dtype, (copy,), x.shape)


def gather(x: UOp, device: str) -> UOp:
    """The whole MULTI `x` on one device: its shards copied there and put side by side."""
    if x.arg is None:
        return copy_to(next((s for s in x.src if s.device == device), x.src[0]), device)
    pieces = [copy_to(s, device) for s in x.src]
    axis, size = x.arg, pieces[0].shape[x.arg]

    def placed(piece: UOp, i: int) -> UOp:
        arg = tuple((i * size, (len(pieces) - 1 - i) * size) if a == axis else (0, 0) for a in range(len(x.shape)))
        return UOp(Ops.PAD, piece.dtype, (piece,), arg)

    # each piece padded into place; a select on "inside this piece" keeps every value exact (even -0.0), as cat
    out = placed(pieces[-1], len(pieces) - 1)
    true = UOp(Ops.CONST, dtypes.bool, (device_node(device),), True)
    ones = UOp(Ops.EXPAND, dtypes.bool, (UOp(Ops.RESHAPE, dtypes.bool, (true,), (1,) * len(x.shape)),), pieces[0].shape)
    for i in reversed(range(len(pieces) - 1)):
        out = placed(ones, i).alu(Ops.WHERE, placed(pieces[i], i), out)
    return out


def _reduce(node: UOp, x: UOp) -> UOp:
    """Each shard reduced; over the split axis, every device then combines all the shards' results in one order."""
    partial = _per_shard(node, [x], x.arg)
    op, axes = node.arg
    if x.arg is None or x.arg not in axes:
        return partial
    # each shard's result gets a buffer first: every device then adds the same values (left in its own device's
    # kernel, it could be fused there and rounded unlike the copy the others read: replicas apart by an ulp)
    realized = [UOp(Ops.CONTIGUOUS, p.dtype, (p,)) for p in partial.src]
    combined = []
    for s in partial.src:
        parts = [copy_to(p, s.device) for p in realized]
        total = parts[0]
        for p in parts[1:]:
            total = total.alu(op, p)
        combined.append(total)
    return multi(combined, None)


def _movement(node: UOp, x: UOp) -> UOp:
    """A movement op per shard where the split axis stays whole (it may move), else on gathered copies."""
    axis, count = x.arg, len(x.src)
    if axis is None:
        return _per_shard(node, [x], None)
    arg: tuple = node.arg
    if node.op is Ops.PERMUTE:
        return _per_shard(node, [x], arg.index(axis))
    if node.op is Ops.EXPAND:
        return _per_shard(node.replace(arg=_split(arg, axis, count)), [x], axis)
    if node.op is Ops.RESHAPE and (new_axis := _reshaped_axis(x.shape, axis, arg, count)) is not None:
        return _per_shard(node.replace(arg=_split(arg, new_axis, count)), [x], new_axis)
    keeps_axis: dict[Ops, Callable[[], bool]] = {
        Ops.PAD: lambda: arg[axis] == (0, 0),
        Ops.SHRINK: lambda: arg[axis] == (0, x.shape[axis]),
        Ops.FLIP: lambda: not arg[axis],
    }
    if node.op in keeps_axis and keeps_axis[node.op]():
        size = x.shape[axis] // count
        return _per_shard(node.replace(arg=tuple((0, size) if i == axis else a for i, a in enumerate(arg))
                                       if node.op is Ops.SHRINK else arg), [x], axis)  # fmt: skip
    return _per_shard(node, [_reshard(x, None)], None)


def _split(shape: tuple[int, ...], axis: int, count: int) -> tuple[int, ...]:
    return tuple(n // count if i == axis else n for i, n in enumerate(shape))


def _reshaped_axis(old: tuple[int, ...], axis: int, new: tuple[int, ...], count: int) -> int | None:
    """The axis of `new` that holds the split after a reshape, where each shard's elements (a run of the flat
    order) stay a run of whole slices of one axis; None where they do not."""
    before, total = prod(old[:axis]), prod(old)
    if total == 0:
        return None
    for i in range(len(new)):
        if prod(new[:i]) == before and new[i] % count == 0:
            return i
    return None
