"""Views: the movement ops (reshape, permute, expand, pad, shrink, flip) as strided windows over a flat buffer."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod, strides_for_shape
from glassgrad.uop.ops import GroupOp, Ops, UOp
from glassgrad.uop.symbolic import simplify
from glassgrad.uop.variable import SymDim, shadow_arg

Range = tuple[int, int]  # [lo, hi) along one dim


@dataclass(frozen=True)
class View:
    """One strided window over a flat buffer: shape, strides, offset, and an optional mask of valid ranges.

    The element at index (i0, ..., in) reads buffer[offset + sum(ik * strides[k])] when lo_k <= ik < hi_k for every
    (lo_k, hi_k) in mask, and reads 0 otherwise (padding). Build views with `View.create`, which keeps them canonical.
    """

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    mask: tuple[Range, ...] | None  # per dim [lo, hi): elements outside read as 0 (padding)
    contiguous: bool = field(init=False)  # offset 0, no mask, row-major strides: reads the buffer as it lies

    def __post_init__(self):
        contiguous = self.offset == 0 and self.mask is None and self.strides == strides_for_shape(self.shape)
        object.__setattr__(self, "contiguous", contiguous)

    @staticmethod
    def create(
        shape: Sequence[int],
        strides: Sequence[int] | None = None,
        offset: int = 0,
        mask: Sequence[Range] | None = None,
    ) -> View:
        """The canonical view of these parts (row-major strides when none are given).

        Size-1 dims get stride 0; a mask that covers everything becomes None; a mask that covers nothing makes the
        one all-padding view of this shape; a masked dim valid at one index gets stride 0 (its address goes into the
        offset); a zero-size shape gives the contiguous view.
        """
        shape = _as_shape(shape, "view")
        strides = strides_for_shape(shape) if strides is None else tuple(strides)
        if len(strides) != len(shape) or (mask is not None and len(mask) != len(shape)):
            raise ValueError(f"view: shape {shape} needs one stride and one mask range per dim, got {strides}, {mask}")
        if 0 in shape:  # no elements, so every zero-size view of this shape reads the same (nothing)
            return View(shape, strides_for_shape(shape), 0, None)
        strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides, strict=True))
        if mask is None:
            return View(shape, strides, offset, None)
        mask = tuple((max(lo, 0), min(hi, int(s))) for (lo, hi), s in zip(mask, shape, strict=True))
        if any(lo >= hi for lo, hi in mask):  # nothing is valid: one form for all such views
            return View(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape))
        if all(r == (0, int(s)) for r, s in zip(mask, shape, strict=True)):
            return View(shape, strides, offset, None)
        # a dim whose mask keeps one index reads one address: fold that address into the offset
        pinned = [hi - lo == 1 for lo, hi in mask]
        offset += sum(lo * st for (lo, _), st, pin in zip(mask, strides, pinned, strict=True) if pin)
        strides = tuple(0 if pin else st for st, pin in zip(strides, pinned, strict=True))
        return View(shape, strides, offset, mask)

    # ---- movement ----

    def reshape(self, new_shape: Sequence[int]) -> View | None:
        """The same elements in row-major order with a new shape; None when no single view can hold them."""
        new_shape = _as_shape(new_shape, "reshape")
        if prod(new_shape) != prod(self.shape):
            raise ValueError(
                f"reshape: {self.shape} has {prod(self.shape)} elements, {new_shape} has {prod(new_shape)}"
            )
        if new_shape == self.shape:
            return self
        if self.contiguous or 0 in self.shape:
            return View.create(new_shape)
        if self.all_invalid:  # a 0-dim view has no mask, so it can't be all padding
            return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None
        # Size-1 dims carry nothing (stride 0, full range): reshape the other dims, then put the 1s back.
        old = [(s, st, r) for s, st, r in zip(self.shape, self.strides, self._ranges(), strict=True) if s != 1]
        sizes = [s for s in new_shape if s != 1]
        offset, dims = self.offset, []
        for old_group, new_group in _equal_product_groups([s for s, _, _ in old], sizes):
            merged = _merge_dims(old[old_group])
            if merged is None:
                return None
            stride, valid, shift = merged
            split = _split_dim(sizes[new_group], stride, valid)
            if split is None:
                return None
            offset += shift
            dims += split
        rest = iter(dims)
        dims = [(0, (0, 1)) if s == 1 else next(rest) for s in new_shape]
        return View.create(new_shape, [st for st, _ in dims], offset, [r for _, r in dims])

    def permute(self, order: Sequence[int]) -> View:
        """The dims reordered: dim k of the result is dim order[k] of this view (np.transpose)."""
        order = tuple(order)
        if sorted(order) != list(range(len(self.shape))):
            raise ValueError(f"permute: {order} is not an ordering of the {len(self.shape)} dims of {self.shape}")
        mask = None if self.mask is None else tuple(self.mask[k] for k in order)
        return View.create(
            tuple(self.shape[k] for k in order), tuple(self.strides[k] for k in order), self.offset, mask
        )

    def expand(self, new_shape: Sequence[int]) -> View:
        """Size-1 dims repeated to `new_shape` with stride 0 (np.broadcast_to)."""
        shape = _as_shape(new_shape, "expand")
        if len(shape) != len(self.shape) or any(s not in (ns, 1) for s, ns in zip(self.shape, shape, strict=True)):
            raise ValueError(f"expand: can't expand {self.shape} to {shape}: only size-1 dims can grow")
        strides = tuple(st if s == ns else 0 for s, ns, st in zip(self.shape, shape, self.strides, strict=True))
        mask = None
        if self.mask is not None:  # a size-1 dim's range is (0, 1), or (0, 0) when the view is all padding
            grown = zip(self.shape, shape, self.mask, strict=True)
            mask = tuple((0, ns) if s != ns and r == (0, 1) else r for s, ns, r in grown)
        return View.create(shape, strides, self.offset, mask)

    def pad(self, arg: Sequence[Range]) -> View:
        """Zeros added before and after each dim (np.pad); the new elements are masked out."""
        arg = _pairs(arg, self.shape, "pad")
        if any(before < 0 or after < 0 for before, after in arg):
            raise ValueError(f"pad: padding {arg} of {self.shape} must be non-negative")
        if all(p == (0, 0) for p in arg):
            return self
        shape = tuple(s if before == after == 0 else s + before + after
                      for s, (before, after) in zip(self.shape, arg, strict=True))  # fmt: skip
        offset = self.offset - sum(before * st for (before, _), st in zip(arg, self.strides, strict=True))
        mask = tuple((lo + before, hi + before) for (lo, hi), (before, _) in zip(self._ranges(), arg, strict=True))
        return View.create(shape, self.strides, offset, mask)

    def shrink(self, arg: Sequence[Range]) -> View:
        """The window [start, end) of each dim (slicing)."""
        arg = _pairs(arg, self.shape, "shrink")
        if any(not 0 <= start <= end <= s for (start, end), s in zip(arg, self.shape, strict=True)):
            raise ValueError(f"shrink: {arg} is not a window of {self.shape} (need 0 <= start <= end <= size)")
        if all(r == (0, s) for r, s in zip(arg, self.shape, strict=True)):
            return self
        shape = tuple(end if start == 0 else end - start for start, end in arg)  # (a symbolic end is kept)
        offset = self.offset + sum(start * st for (start, _), st in zip(arg, self.strides, strict=True))
        mask = None
        if self.mask is not None:  # View.create clips the ranges to the new shape
            mask = tuple((lo - start, hi - start) for (lo, hi), (start, _) in zip(self.mask, arg, strict=True))
        return View.create(shape, self.strides, offset, mask)

    def flip(self, arg: Sequence[bool]) -> View:
        """The dims marked True reversed."""
        if len(arg) != len(self.shape):
            raise ValueError(f"flip: {tuple(arg)} needs one flag per dim of {self.shape}")
        offset = self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, arg, strict=True) if f)
        strides = tuple(-st if f else st for st, f in zip(self.strides, arg, strict=True))
        mask = None
        if self.mask is not None:
            flipped = zip(self.mask, self.shape, arg, strict=True)
            mask = tuple((s - hi, s - lo) if f else (lo, hi) for (lo, hi), s, f in flipped)
        return View.create(self.shape, strides, offset, mask)

    # ---- indexing ----

    def to_indexed(self, idxs: Sequence[UOp]) -> tuple[UOp, UOp]:
        """(flat buffer index, validity) of the element at `idxs`, one int UOp per dim."""
        if len(idxs) != len(self.shape):
            raise ValueError(f"to_indexed: {len(idxs)} indices for the {len(self.shape)} dims of {self.shape}")
        terms = [idx if st == 1 else idx * st for idx, st in zip(idxs, self.strides, strict=True) if st != 0]
        if self.offset != 0 or not terms:
            terms.append(UOp.const(idxs[0].dtype if idxs else dtypes.int, self.offset))  # index math in the idxs' dtype
        return functools.reduce(operator.add, terms), self._validity(idxs)

    def _validity(self, idxs: Sequence[UOp]) -> UOp:
        if self.mask is None:
            return UOp.const(dtypes.bool, True)
        if self.all_invalid:
            return UOp.const(dtypes.bool, False)
        checks = []
        for idx, s, (lo, hi) in zip(idxs, self.shape, self.mask, strict=True):
            if lo > 0:
                checks.append(idx > lo - 1)  # lo <= idx, as one comparison
            if hi < s:
                checks.append(idx < hi)
        return functools.reduce(operator.and_, checks)

    def unravel_into(self, idxs: Sequence[UOp], shape: tuple[int, ...] | None) -> tuple[list[UOp], UOp]:
        """(the indices in `shape` of the position this view maps `idxs` to, or [the flat position] for None, the
        view's validity). Where the view pads, each index is simplified knowing that the padded dims lie in their
        valid ranges, since it is only read there: each such dim is first a loop over its range plus the range's
        start, and takes its own index back after. A padded gradient's ((y*20 + x - 84) // 400) % 32 is then its
        channel instead of a division at every element."""
        given = self._valid_ranges(idxs)
        stand_ins = [given[d][0] + given[d][1] if d in given else idx for d, idx in enumerate(idxs)]
        flat, _ = self.to_indexed(stand_ins)
        out = [flat] if shape is None else _unravel(flat, shape)
        if given:
            back = {place: idxs[d] - start for d, (place, start) in given.items()}
            out = [simplify(i).substitute(back) for i in out]
        return out, self._validity(idxs)

    def _valid_ranges(self, idxs: Sequence[UOp]) -> dict[int, tuple[UOp, int]]:
        """For each dim the mask narrows, (a loop over the valid range's length, the range's start): the loop plus the
        start stands in for the dim's index (unravel_into substitutes the index back)."""
        if self.mask is None or self.all_invalid:
            return {}
        found = {}
        for d, (idx, s, (lo, hi)) in enumerate(zip(idxs, self.shape, self.mask, strict=True)):
            if (lo, hi) != (0, int(s)):
                found[d] = (UOp(Ops.RANGE, idx.dtype, (UOp.const(idx.dtype, hi - lo),), ("valid range", d)), lo)
        return found

    @property
    def all_invalid(self) -> bool:
        """Whether every element is padding."""
        return self.mask is not None and any(lo >= hi for lo, hi in self.mask)

    def _ranges(self) -> tuple[Range, ...]:
        return self.mask if self.mask is not None else tuple((0, int(s)) for s in self.shape)


@dataclass(frozen=True)
class ShapeTracker:
    """A stack of views: each view reads the one below it as a flat array; the last one gives the shape."""

    views: tuple[View, ...]

    @staticmethod
    def from_shape(shape: Sequence[int]) -> ShapeTracker:
        """A contiguous buffer of `shape`."""
        return ShapeTracker((View.create(shape),))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.views[-1].shape

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def contiguous(self) -> bool:
        return len(self.views) == 1 and self.views[0].contiguous

    def reshape(self, new_shape: Sequence[int]) -> ShapeTracker:
        view = self.views[-1].reshape(new_shape)
        if view is None:  # View.reshape already looked for a single view: read this one through a new one
            return ShapeTracker(self.views + (View.create(new_shape),))
        return self._with_last(view)

    def permute(self, order: Sequence[int]) -> ShapeTracker:
        return self._with_last(self.views[-1].permute(order))

    def expand(self, new_shape: Sequence[int]) -> ShapeTracker:
        return self._with_last(self.views[-1].expand(new_shape))

    def pad(self, arg: Sequence[Range]) -> ShapeTracker:
        return self._with_last(self.views[-1].pad(arg))

    def shrink(self, arg: Sequence[Range]) -> ShapeTracker:
        return self._with_last(self.views[-1].shrink(arg))

    def flip(self, arg: Sequence[bool]) -> ShapeTracker:
        return self._with_last(self.views[-1].flip(arg))

    def _with_last(self, view: View) -> ShapeTracker:
        views = self.views[:-1] + (view,)
        while len(views) >= 2:
            merged = _merge_views(views[-2], views[-1])
            if merged is None:
                break
            views = views[:-2] + (merged,)
        return ShapeTracker(views)

    def to_indexed(self, idxs: Sequence[UOp]) -> tuple[UOp, UOp]:
        """(flat buffer index, validity) of the element at `idxs`, one int UOp per dim, through every view."""
        (flat,), valid = self.indices_in(idxs, None)
        return flat, valid

    def indices_in(self, idxs: Sequence[UOp], shape: tuple[int, ...] | None) -> tuple[list[UOp], UOp]:
        """(the indices in `shape` of the element at `idxs` read through every view, or [its flat index] for None,
        its validity); each view's padding is taken into account as View.unravel_into says."""
        valid = UOp.const(dtypes.bool, True)
        idxs = list(idxs)
        for k in reversed(range(len(self.views))):
            idxs, view_valid = self.views[k].unravel_into(idxs, self.views[k - 1].shape if k else shape)
            valid = _logical_and(valid, view_valid)
        return idxs, valid

    def real_strides(self) -> tuple[int | None, ...]:
        """Each dim's stride in the buffer, or None where no one stride describes it (padding, or views below)."""
        top = self.views[-1]
        stacked = len(self.views) > 1
        return tuple(
            None if r != (0, int(s)) or (stacked and st != 0) else st
            for s, st, r in zip(top.shape, top.strides, top._ranges(), strict=True)
        )


# ---- helpers ----


def _as_int(x: int) -> int:
    return x if isinstance(x, SymDim) else operator.index(x)  # a symbolic size stays one (uop/variable.py)


def _as_shape(shape: Sequence[int], op: str) -> tuple[int, ...]:
    shape = tuple(_as_int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"{op}: shape {shape} has a negative size")
    return shape


def _pairs(arg: Sequence[Range], shape: tuple[int, ...], op: str) -> tuple[Range, ...]:
    arg = tuple((_as_int(a), _as_int(b)) for a, b in arg)
    if len(arg) != len(shape):
        raise ValueError(f"{op}: {arg} needs one (before, after) pair per dim of {shape}")
    return arg


def _logical_and(a: UOp, b: UOp) -> UOp:
    true = UOp.const(dtypes.bool, True)
    return b if a is true else a if b is true else a & b


def _unravel(flat, shape: tuple[int, ...]) -> list:
    """The row-major index in `shape` of position `flat` (an int, or an int UOp), for 0 <= flat < prod(shape)."""
    outermost = next((k for k, s in enumerate(shape) if s != 1), len(shape))
    idxs, stride = [], 1
    for k in reversed(range(len(shape))):
        if shape[k] == 1:
            idxs.append(flat.const_like(0) if isinstance(flat, UOp) else 0)
            continue
        idx = flat if stride == 1 else flat // stride
        idxs.append(idx if k == outermost else idx % shape[k])  # the outermost index needs no wrap
        stride *= shape[k]
    return idxs[::-1]


def _equal_product_groups(old: list[int], new: list[int]) -> list[tuple[slice, slice]]:
    """Split two lists of sizes (each >= 2, same product) into the shortest consecutive runs of equal product."""
    groups, i, j = [], 0, 0
    while i < len(old):
        end_old, end_new, old_size, new_size = i + 1, j + 1, old[i], new[j]
        while old_size != new_size:
            if old_size < new_size:
                old_size, end_old = old_size * old[end_old], end_old + 1
            else:
                new_size, end_new = new_size * new[end_new], end_new + 1
        groups.append((slice(i, end_old), slice(j, end_new)))
        i, j = end_old, end_new
    return groups


def _merge_dims(dims: list[tuple[int, int, Range]]) -> tuple[int, Range, int] | None:
    """Row-major dims (size, stride, valid range) as one: (stride, valid range, offset shift), or None if impossible.

    The merged index is i = i_outer * inner_size + i_inner. Its valid elements must be one run of i, and evenly spaced
    in the buffer: either the outer dim is valid at one index only, or the inner dim is fully valid and
    outer_stride == inner_size * inner_stride.
    """
    size, stride, (lo, hi) = dims[-1]
    shift = 0
    for outer_size, outer_stride, (outer_lo, outer_hi) in reversed(dims[:-1]):
        if outer_hi - outer_lo == 1:
            # i_outer is always outer_lo, which the merged stride would place at outer_lo * size * stride
            shift += outer_lo * (outer_stride - size * stride)
        elif (lo, hi) != (0, size) or outer_stride != size * stride:
            return None
        lo, hi = outer_lo * size + lo, (outer_hi - 1) * size + hi
        size *= outer_size
    return stride, (lo, hi), shift


def _split_dim(sizes: list[int], stride: int, valid: Range) -> list[tuple[int, Range]] | None:
    """(stride, valid range) of each of `sizes` that split one dim row-major, or None if the valid run isn't a box."""
    lo, hi = valid
    inner = prod(sizes)
    dims = []
    for size in sizes:
        inner //= size
        if lo % inner == 0 and hi % inner == 0:  # whole rows of the inner dims: they are fully valid
            dims.append((stride * inner, (lo // inner, hi // inner)))
            lo, hi = 0, inner
        elif lo // inner == (hi - 1) // inner:  # part of one row: this dim is valid at one index
            row = lo // inner
            dims.append((stride * inner, (row, row + 1)))
            lo, hi = lo - row * inner, hi - row * inner
        else:
            return None
    return dims


def _merge_views(lower: View, upper: View) -> View | None:
    """One view that reads like `upper` reading `lower` as a flat array, or None if this finds none."""
    if 0 in upper.shape or upper.all_invalid:  # reads no element of `lower`
        return upper
    if upper.contiguous and prod(upper.shape) == prod(lower.shape):
        merged = lower.reshape(upper.shape)
        if merged is not None:
            return merged
    return _compose(lower, upper)


def _compose(lower: View, upper: View) -> View | None:
    """`upper` over `lower` as one view, when upper's steps move lower's index without carries.

    Let c(i) be lower's index of the flat position that upper's element i reads. Start at upper's first valid
    element and take d_k = the change of c for one step along upper's dim k. If base + sum((i_k - lo_k) * d_k) stays
    inside lower's shape for every valid i, it is exactly c(i) (row-major positions have one index each), so the
    address is affine in i and lower's mask becomes ranges of i, where each masked coordinate moves with one dim.
    """
    ranges = upper._ranges()
    first = tuple(lo for lo, _ in ranges)
    first_flat = upper.offset + sum(i * st for i, st in zip(first, upper.strides, strict=True))
    base = _unravel(first_flat, lower.shape)
    steps = [[0] * len(lower.shape) for _ in upper.shape]
    for k, ((lo, hi), st) in enumerate(zip(ranges, upper.strides, strict=True)):
        if hi - lo > 1:
            steps[k] = [b - a for a, b in zip(base, _unravel(first_flat + st, lower.shape), strict=True)]
    counts = [hi - lo for lo, hi in ranges]
    reach = [[step[j] * (n - 1) for step, n in zip(steps, counts, strict=True)] for j in range(len(lower.shape))]
    low = [b + sum(min(r, 0) for r in rs) for b, rs in zip(base, reach, strict=True)]
    high = [b + sum(max(r, 0) for r in rs) for b, rs in zip(base, reach, strict=True)]
    if any(lo < 0 or hi >= size for lo, hi, size in zip(low, high, lower.shape, strict=True)):
        return None
    new_ranges = list(ranges)
    for j, (mask_lo, mask_hi) in enumerate(lower._ranges()):
        if mask_lo <= low[j] and high[j] < mask_hi:
            continue
        movers = [k for k, r in enumerate(reach[j]) if r != 0]
        if not movers:  # this coordinate is fixed and outside lower's mask: nothing is valid
            return View.create(upper.shape, mask=((0, 0),) * len(upper.shape)) if upper.shape else None
        if len(movers) > 1:
            return None
        k, d = movers[0], steps[movers[0]][j]
        # lower's element is valid when mask_lo <= base_j + t * d < mask_hi, with t = i_k - first_k
        low_end, high_end = mask_lo - base[j], mask_hi - 1 - base[j]
        if d < 0:  # dividing by d < 0 swaps the ends
            low_end, high_end = high_end, low_end
        t_min, t_max = -(-low_end // d), high_end // d  # ceil and floor
        new_ranges[k] = (max(new_ranges[k][0], first[k] + t_min), min(new_ranges[k][1], first[k] + t_max + 1))
    strides = [sum(d * st for d, st in zip(step, lower.strides, strict=True)) for step in steps]
    first_address = lower.offset + sum(c * st for c, st in zip(base, lower.strides, strict=True))
    offset = first_address - sum(i * st for i, st in zip(first, strides, strict=True))
    return View.create(upper.shape, strides, offset, new_ranges)


def apply_movement(st: ShapeTracker, mv: UOp) -> ShapeTracker:
    """The tracker with the movement op `mv` applied (RESHAPE -> st.reshape(arg), ...)."""
    return getattr(st, mv.op.name.lower())(shadow_arg(mv.arg))  # a symbolic size laid out at its largest


def chain_view(node: UOp) -> ShapeTracker:
    """The ShapeTracker of a chain of movement ops over a buffer, as seen from the buffer's flat data."""
    if node.op not in GroupOp.Movement:
        return ShapeTracker.from_shape(node.shape)
    return apply_movement(chain_view(node.src[0]), node)
