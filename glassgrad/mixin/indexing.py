"""Tensor methods for indexing, gathering and scattering, joining and splitting, padding and resizing.

Positional selections (slices, cat, pad, roll, unfold, diagonal) are movement ops: views, no copies. There is no
load-by-value primitive, so an integer index selects by comparing it with arange (a one-hot mask) and summing what
the mask keeps; that fuses into one kernel, and its gradient is the same mask applied to the incoming gradient.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes, promote_types, truncate
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.helpers import prod
from glassgrad.mixin.index_forms import as_tuple_index, positions
from glassgrad.shape import ShapeError, shape_arg
from glassgrad.tensor_checks import checked_index, out_of_bounds
from glassgrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

PAD_MODES = ("constant", "reflect", "replicate", "circular")
SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
# mode -> how many dims it resizes; tinygrad's "linear" resizes as many as `size` names (bilinear, trilinear)
INTERPOLATE_MODES = {"nearest": None, "linear": None, "bilinear": 2, "trilinear": 3}


class IndexingMixin:
    """Tensor methods for indexing, gathering and scattering, joining and splitting, padding and resizing."""

    # ---- t[index] and t[index] = value ----

    def __getitem__(self, index: Any) -> Tensor:
        """t[index] as in PyTorch: ints, slices, None, ..., int tensors and lists, bool masks (realized to count)."""
        basic, advanced = _parse_index(self, index)
        viewed = _BasicPlan(self.shape, basic).apply(self)
        return _AdvancedIndex(viewed.shape, advanced).gather(viewed) if advanced else viewed

    def __setitem__(self, index: Any, value: Any) -> None:
        """t[index] = value: written lazily into this tensor's buffer (or into its graph while it has none)."""
        from glassgrad.tensor import Tensor

        grad = not Tensor.no_grad and bool(self.requires_grad or (isinstance(value, Tensor) and value.requires_grad))
        if grad and self.requires_grad and self._is_leaf:
            raise RuntimeError("setitem: this tensor is a leaf that requires grad and cannot be written in place; "
                               "write into a clone(), or inside `with Tensor.no_grad():`")  # fmt: skip
        # what to update: for autograd the graph that built this tensor, else what stands for it now
        old = Tensor._derived(self._autograd_root(), self) if grad else Tensor(self._current_uop())
        value = _as_value(value, self, "setitem")
        new = _mask_write(old, index, value)
        new = _indexed_write(old, index, value) if new is None else new
        if new is None:  # the index selects nothing
            return
        if not grad and _has_storage(old.uop):
            whole = old.uop.op is Ops.ASSIGN or self._is_contiguous_buffer()
            self.assign(new)
            if not whole:  # a view of another tensor's buffer: write now, so that the other tensor reads it
                self.realize()
            return
        self.uop, self._autograd_uop = new.uop, None
        if grad:
            self._requires_grad, self._is_leaf = True, False

    # ---- gather, scatter, masks ----

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[i][j] = self[index[i][j]][j] for dim=0: the values along `dim` at the positions in `index`."""
        dim = self._axis(dim, "gather")
        _check_index_tensor(index, "gather", "index")
        if index.ndim != self.ndim:
            raise ArgumentError(f"gather: index has {index.ndim} dimensions but input has {self.ndim}; they must match")
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        for d, (i, s) in enumerate(zip(index.shape, self.shape, strict=True)):
            if d != dim and i > s:
                raise ArgumentError(f"gather: index has shape {index.shape} but input has {self.shape}; index can't be "
                                    f"bigger than input in dimension {d} (other than dim={dim})")  # fmt: skip
        x = self.shrink(tuple(None if d == dim else (0, index.shape[d]) for d in range(self.ndim)))
        index = checked_index(index, self.shape[dim], out_of_bounds("gather", dim, self.shape[dim]))
        onehot = index.unsqueeze(-1) == _arange(self.shape[dim], self.device)
        lined_up = x.unsqueeze(-1).transpose(dim, -1)  # dim moved to a new last axis, size 1 where it was
        return _masked_sum(onehot, lined_up, -1)

    def scatter(self, dim: int, index: Tensor, src: Tensor | float | None = None, *, value: float | None = None,
                reduce: str | None = None) -> Tensor:  # fmt: skip
        """A copy of self with self[index[i][j]][j] = src[i][j] for dim=0; src may be a tensor or a number."""
        if (src is None) == (value is None):
            raise TypeError("scatter: pass exactly one of src (a tensor or a number) and value")
        src = value if src is None else src
        if self.ndim == 0:
            flat_src = src.reshape(-1) if hasattr(src, "reshape") else src
            return self.reshape(1).scatter(0, index.reshape(-1), flat_src, reduce=reduce).reshape(())
        dim = self._axis(dim, "scatter")
        src = _scatter_src(self, dim, index, src, "scatter")
        if reduce is not None:
            reductions = {"add": "sum", "multiply": "prod"}
            if reduce not in reductions:
                raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
            return self.scatter_reduce(dim, index, src, reductions[reduce])
        if index.numel() == 0:
            return self
        parts = _ScatterParts(self, dim, index, src, "scatter")
        m = parts.mask.shape[-2]
        entry = _arange(m, self.device).reshape(m, 1)
        # where several entries of index name the same place the last one is written (as PyTorch on the CPU)
        winner = parts.mask.where(entry, -1).max(-2, keepdim=True)
        placed = _masked_sum(entry == winner, parts.src, -2)
        return parts.finish((winner.squeeze(-2) >= 0).where(placed, parts.target))

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True
                       ) -> Tensor:  # fmt: skip
        """A copy of self with src reduced into the places index names: sum, prod, mean, amax or amin."""
        if reduce not in SCATTER_REDUCTIONS:
            raise ArgumentError(f"scatter_reduce: reduce must be one of {', '.join(SCATTER_REDUCTIONS)}, "
                                f"got {reduce!r}")  # fmt: skip
        if self.ndim == 0:
            return self.reshape(1).scatter_reduce(0, index.reshape(-1), src.reshape(-1), reduce,
                                                  include_self=include_self).reshape(())  # fmt: skip
        dim = self._axis(dim, "scatter_reduce")
        src = _scatter_src(self, dim, index, src, "scatter_reduce")
        if index.numel() == 0:
            return self
        parts = _ScatterParts(self, dim, index, src, "scatter_reduce")
        mask, target = parts.mask, parts.target
        if reduce in ("sum", "mean"):
            total, count = _masked_sum(mask, parts.src, -2), mask.sum(-2).cast(self.dtype)
            if include_self:
                total, count = total + target, count + 1
            if reduce == "mean":  # integer means round down, as in PyTorch
                total = total.div(count.maximum(1), rounding_mode=None if dtypes.is_float(self.dtype) else "floor")
        else:
            identity = {"prod": 1, "amax": dtypes.min(self.dtype), "amin": dtypes.max(self.dtype)}[reduce]
            values = mask.where(parts.src, _full_like_scalar(self, identity))
            if include_self:  # one reduction over self and src together: ties share the gradient evenly, as PyTorch
                values = values.cat(target.unsqueeze(-2), dim=-2)
            total = {"prod": values.prod, "amax": values.max, "amin": values.min}[reduce](-2)
        return parts.finish(total if include_self else (mask.sum(-2) > 0).where(total, target))

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """value where mask is true, else self (mask broadcasts with self)."""
        from glassgrad.tensor import Tensor

        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise DtypeError(f"masked_fill: mask must be a bool tensor, got {got}")
        if not isinstance(value, Tensor):
            return mask.where(_full_like_scalar(self, value), self)
        if value.ndim != 0:
            raise ArgumentError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
        return mask.where(value.cast(self.dtype), self)

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """int64 one-hot encoding on a new last axis; num_classes=-1 realizes max()+1."""
        _check_index_tensor(self, "one_hot", "the tensor")
        if num_classes == -1:
            if self.numel() == 0:
                raise ArgumentError("one_hot: cannot infer num_classes from an empty tensor; pass num_classes")
            num_classes = int(self.max().item()) + 1
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ArgumentError(f"one_hot: num_classes must be -1 or a non-negative int, got {num_classes!r}")
        classes = checked_index(self, num_classes, f"one_hot: class {{value}} is outside 0..{num_classes - 1}")
        return (classes.unsqueeze(-1) == _arange(num_classes, self.device)).cast(dtypes.int64)

    # ---- joining and splitting ----

    def cat(self, *tensors: Tensor, dim: int = 0, axis: int | None = None) -> Tensor:
        """Join tensors along `dim`: a.cat(b), Tensor.cat(a, b) or Tensor.cat([a, b]); one kernel when realized."""
        parts = _tensor_list(self, tensors, "cat")
        first = next((t for t in parts if t.shape != (0,)), parts[0])
        parts = [t for t in parts if t.shape != (0,) or t.ndim == first.ndim]  # PyTorch skips other 1-d empties
        if first.ndim == 0:
            raise ArgumentError("cat: zero-dimensional tensors cannot be concatenated; use stack")
        dim = first._axis(dim if axis is None else axis, "cat")
        for i, t in enumerate(parts):
            if t.ndim != first.ndim or t.shape[:dim] + t.shape[dim + 1 :] != first.shape[:dim] + first.shape[dim + 1 :]:
                raise ArgumentError(f"cat: tensor {i} has shape {t.shape} but tensor 0 has {first.shape}; sizes must "
                                    f"match except in dimension {dim}")  # fmt: skip
            if t.device != first.device:
                raise ArgumentError(f"cat: tensor {i} is on {t.device} but tensor 0 is on {first.device}")
        dtype = first.dtype
        for t in parts:
            dtype = promote_types(dtype, t.dtype)
        parts = [t.cast(dtype) for t in parts]
        total = sum(t.shape[dim] for t in parts)
        starts = [sum(t.shape[dim] for t in parts[:i]) for i in range(len(parts))]

        def placed(t: Tensor, start: int) -> Tensor:
            return t.pad(tuple((start, total - start - t.shape[dim]) if d == dim else None for d in range(t.ndim)))

        # each piece padded into place; a select on "inside this piece" keeps every value exact (even -0.0)
        out = placed(parts[-1], starts[-1])
        for t, start in zip(reversed(parts[:-1]), reversed(starts[:-1]), strict=True):
            out = placed(_bool_ones(t.shape, t.device), start).where(placed(t, start), out)
        return out

    def stack(self, *tensors: Tensor, dim: int = 0, axis: int | None = None) -> Tensor:
        """Join same-shaped tensors along a new dimension `dim`."""
        parts = _tensor_list(self, tensors, "stack")
        dim = parts[0]._axis(dim if axis is None else axis, "stack", parts[0].ndim + 1)
        for i, t in enumerate(parts):
            if t.shape != parts[0].shape:
                raise ArgumentError(f"stack: every tensor must have the same shape, but tensor 0 has {parts[0].shape} "
                                    f"and tensor {i} has {t.shape}")  # fmt: skip
        return parts[0].unsqueeze(dim).cat(*[t.unsqueeze(dim) for t in parts[1:]], dim=dim)

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Views of consecutive pieces along `dim`: of one size (the last may be smaller) or of the given sizes."""
        if self.ndim == 0:
            raise ArgumentError("split: a 0-d tensor cannot be split")
        dim = self._axis(dim, "split")
        n = self.shape[dim]
        if isinstance(split_size_or_sections, int):
            size = split_size_or_sections
            if size < 0 or (size == 0 and n):
                raise ArgumentError(f"split: split_size must be positive, got {size} for a dimension of size {n}")
            sizes = [min(size, n - start) for start in range(0, n, size)] if n else [0]
        else:
            sizes = list(split_size_or_sections)
            if any(not isinstance(s, int) or s < 0 for s in sizes) or sum(sizes) != n:
                raise ArgumentError(f"split: sizes {sizes} must be non-negative and sum to {n}, the size of dimension "
                                    f"{dim} of {self.shape}")  # fmt: skip
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(self.shrink(tuple((a, a + s) if d == dim else None for d in range(self.ndim)))
                     for a, s in zip(starts, sizes, strict=True))  # fmt: skip

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split into pieces of ceil(size / chunks) along `dim` (fewer than `chunks` when they run out)."""
        if not isinstance(chunks, int) or chunks <= 0:
            raise ArgumentError(f"chunk: chunks must be a positive int, got {chunks!r}")
        n = self.shape[self._axis(dim, "chunk")] if self.ndim else 0
        if self.ndim and n == 0:
            return tuple(self for _ in range(chunks))
        return self.split(-(-n // chunks), dim)

    def repeat(self, repeats: int | Sequence[int], *more: int) -> Tensor:
        """Tile the tensor: repeats[i] copies along dim i (new leading dims when there are more repeats than dims)."""
        reps = shape_arg(tuple(repeats) if isinstance(repeats, (tuple, list)) else (repeats, *more), "repeat")
        if len(reps) < self.ndim:
            raise ArgumentError(f"repeat: {len(reps)} repeats for a tensor of {self.ndim} dims {self.shape}; need at "
                                f"least {self.ndim}")  # fmt: skip
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        pairs = [x for s in shape for x in (1, s)]
        tiled = [x for r, s in zip(reps, shape, strict=True) for x in (r, s)]
        return self.reshape(pairs).expand(tiled).reshape(tuple(r * s for r, s in zip(reps, shape, strict=True)))

    def repeat_interleave(self, repeats: int | Sequence[int] | Tensor, dim: int | None = None, *,
                          output_size: int | None = None) -> Tensor:  # fmt: skip
        """Repeat each element `repeats` times along `dim` (flattened if None); a tensor of counts is realized."""
        from glassgrad.tensor import Tensor

        x, dim = (self.flatten(), 0) if dim is None else (self, self._axis(dim, "repeat_interleave"))
        n = x.shape[dim] if x.ndim else 1
        if isinstance(repeats, int):
            if repeats < 0:
                raise ShapeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
            counts = [repeats] * n
            copies = x.unsqueeze(dim + 1).expand(x.shape[: dim + 1] + (repeats,) + x.shape[dim + 1 :])
            out = copies.flatten(dim, dim + 1)
        else:
            counts = repeats.tolist() if isinstance(repeats, Tensor) else list(repeats)
            counts = counts if isinstance(counts, list) else [counts]
            counts = counts * n if len(counts) == 1 else counts
            if len(counts) != n or any(not isinstance(c, int) or c < 0 for c in counts):
                raise ArgumentError(f"repeat_interleave: repeats must be {n} non-negative ints (one per element along "
                                    f"dim {dim}), got {counts}")  # fmt: skip
            picks = [i for i, c in enumerate(counts) for _ in range(c)]
            out = x[(slice(None),) * dim + (_positions(x, picks),)]
        if output_size is not None and output_size != sum(counts):
            raise ArgumentError(f"repeat_interleave: output_size={output_size} but the repeats make {sum(counts)}")
        return out

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Rotate elements along dims by shifts (over the flattened tensor when dims is None); a view."""
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if dims is None:
            if len(shifts) != 1:
                raise ArgumentError(f"roll: without dims, shifts must be one int, got {shifts}")
            return self.flatten().roll(shifts[0], 0).reshape(self.shape)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise ArgumentError(f"roll: shifts {shifts} and dims {dims} must have the same length")
        x = self
        for shift, d in zip(shifts, dims, strict=True):
            d = x._axis(d, "roll")
            n = x.shape[d] if x.ndim else 0
            if n == 0 or shift % n == 0:
                continue
            # two copies end to end along d, read from n - shift: out[i] = x[(i - shift) mod n]
            twice = x.unsqueeze(d).expand(x.shape[:d] + (2,) + x.shape[d:]).flatten(d, d + 1)
            start = n - shift % n
            x = twice.shrink(tuple((start, start + n) if i == d else None for i in range(x.ndim)))
        return x

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """Windows of `size` every `step` along `dimension`, on a new last axis (PyTorch's Tensor.unfold); a view."""
        if self.ndim == 0:
            if size > 1:
                raise ArgumentError(f"unfold: size {size} is bigger than 1, the size of a 0-d tensor")
            return self.reshape(1)
        dim = self._axis(dimension, "unfold")
        n = self.shape[dim]
        if not isinstance(size, int) or not 0 <= size <= n:
            raise ArgumentError(f"unfold: size {size} must be between 0 and {n}, the size of dimension {dim}")
        if not isinstance(step, int) or step <= 0:
            raise ArgumentError(f"unfold: step must be a positive int, got {step}")
        count = (n - size) // step + 1
        x = self.transpose(dim, -1)  # (..., n)
        lead, keep = x.shape[:-1], tuple(None for _ in x.shape[:-1])
        if step >= size:  # windows do not overlap: cut into rows of `step`, keep the first `size` of each
            rows = x.pad(keep + ((0, max(count * step - n, 0)),)).shrink(keep + ((0, count * step),))
            windows = rows.reshape(lead + (count, step)).shrink(keep + (None, (0, size)))
        else:
            # `size` copies of the row laid end to end and re-cut into rows of n + 1: row j is x shifted by j
            copies = x.unsqueeze(-2).expand(lead + (size, n)).reshape(lead + (size * n,))
            shifted = copies.pad(keep + ((0, size),)).reshape(lead + (size, n + 1))
            shifted = shifted.shrink(keep + (None, (0, (count - 1) * step + 1)))
            windows = _take_every(shifted, len(lead) + 1, step).transpose(-1, -2)
        return windows.transpose(dim, -2)

    def meshgrid(self, *tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids (views) of 0-d or 1-d tensors: indexing 'ij' (matrix) or 'xy' (Cartesian)."""
        parts = _tensor_list(self, tensors, "meshgrid")
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        for i, t in enumerate(parts):
            if t.ndim > 1:
                raise ArgumentError(f"meshgrid: tensor {i} has shape {t.shape}; every tensor must be 0-d or 1-d")
            if t.dtype != parts[0].dtype or t.device != parts[0].device:
                raise ArgumentError(f"meshgrid: tensor {i} is {t.dtype} on {t.device} but tensor 0 is {parts[0].dtype} "
                                    f"on {parts[0].device}; all must match")  # fmt: skip
        axes = list(range(len(parts)))
        if indexing == "xy" and len(parts) > 1:  # the first two inputs give the columns and the rows
            axes[0], axes[1] = 1, 0
        shape = [0] * len(parts)
        for t, a in zip(parts, axes, strict=True):
            shape[a] = t.numel()
        return tuple(t.reshape(tuple(s if k == a else 1 for k, s in enumerate(shape))).expand(tuple(shape))
                     for t, a in zip(parts, axes, strict=True))  # fmt: skip

    # ---- triangles and diagonals ----

    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle of the last two dims (column - row >= diagonal); zeros elsewhere."""
        return _triangle(self, diagonal, "triu")

    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle of the last two dims (column - row <= diagonal); zeros elsewhere."""
        return _triangle(self, diagonal, "tril")

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of dims dim1 and dim2 (above it for offset > 0) as a new last axis; a view."""
        if self.ndim < 2:
            raise ArgumentError(f"diagonal: the tensor has shape {self.shape}; it needs at least 2 dimensions")
        d1, d2 = self._axis(dim1, "diagonal"), self._axis(dim2, "diagonal")
        if d1 == d2:
            raise ArgumentError(f"diagonal: dim1 and dim2 are both dimension {d1}; they must differ")
        x = self.permute([d for d in range(self.ndim) if d not in (d1, d2)] + [d1, d2])
        rows, cols = x.shape[-2:]
        length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
        top, left = (max(-offset, 0), max(offset, 0)) if length else (0, 0)
        lead, keep = x.shape[:-2], tuple(None for _ in x.shape[:-2])
        square = x.shrink(keep + ((top, top + length), (left, left + length)))
        # the square read as rows of length + 1: the first column is the diagonal
        rows_of_more = square.reshape(lead + (length * length,)).pad(keep + ((0, length),))
        first_column = rows_of_more.reshape(lead + (length, length + 1)).shrink(keep + (None, (0, 1)))
        return first_column.reshape(lead + (length,))

    # ---- padding and resizing ----

    def pad(self, padding: Sequence[int] | Sequence[tuple[int, int] | None] | None = None, mode: str = "constant",
            value: float | None = None, *, pad: Sequence[int] | None = None) -> Tensor:  # fmt: skip
        """Pad as torch.nn.functional.pad (a flat list from the last dim) or with a (before, after) pair per dim."""
        if (padding is None) == (pad is None):
            raise TypeError("pad: pass the padding once, as `padding` or as `pad`")
        pairs = _pad_pairs(self, padding if pad is None else pad)
        if mode not in PAD_MODES:
            raise ArgumentError(f"pad: mode must be one of {', '.join(PAD_MODES)}, got {mode!r}")
        if mode != "constant" and value not in (None, 0):
            raise ArgumentError(f"pad: mode {mode!r} takes no value (got value={value})")
        if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops: PyTorch crops first unless it reflects
            grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
            crop_first = mode in ("constant", "circular")
            x = self if crop_first else self.pad(grow, mode)
            crop = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape, strict=True))
            if any(low > high for low, high in crop):
                raise ShapeError(f"pad: padding {padding if pad is None else pad} crops more than {self.shape} holds")
            return x.shrink(crop).pad(grow, mode, value) if crop_first else x.shrink(crop)
        if all(p == (0, 0) for p in pairs):
            return self
        if mode != "constant":
            x = self
            for d, (before, after) in enumerate(pairs):
                x = _pad_dim(x, d, before, after, mode) if before or after else x
            return x
        padded = self._movement(Ops.PAD, pairs)
        if not value:
            return padded
        inside = _bool_ones(self.shape, self.device)._movement(Ops.PAD, pairs)
        return inside.where(padded, _full_like_scalar(self, value))

    def interpolate(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                    mode: str = "nearest", align_corners: bool | None = None,
                    recompute_scale_factor: bool | None = None) -> Tensor:  # fmt: skip
        """Resize as torch.nn.functional.interpolate: nearest, linear (any dims, as tinygrad), bilinear, trilinear."""
        if mode not in INTERPOLATE_MODES:
            raise ArgumentError(f"interpolate: mode must be one of {', '.join(INTERPOLATE_MODES)}, got {mode!r}")
        if mode == "nearest" and align_corners is not None:
            raise ArgumentError("interpolate: align_corners can only be set with mode 'linear', 'bilinear' or "
                                "'trilinear'")  # fmt: skip
        if (size is None) == (scale_factor is None):
            raise ArgumentError("interpolate: pass exactly one of size and scale_factor")
        given = size if size is not None else scale_factor
        # a sequence names the trailing dims to resize; a number resizes all but batch and channel, as PyTorch
        values = list(given) if isinstance(given, (tuple, list)) else [given] * (self.ndim - 2)
        if INTERPOLATE_MODES[mode] not in (None, len(values)) or not 1 <= len(values) <= self.ndim:
            needs = INTERPOLATE_MODES[mode] or "1 or more"
            raise ArgumentError(f"interpolate: mode {mode!r} resizes {needs} dims, got {len(values)} for shape "
                                f"{self.shape}")  # fmt: skip
        x = self
        for d, v in reversed(list(enumerate(values, self.ndim - len(values)))):  # the last dim first, as PyTorch
            n = self.shape[d]
            out = int(v) if size is not None else math.floor(float(n) * v)
            factor = None if size is not None or recompute_scale_factor else float(v)
            if out <= 0 or n == 0:
                raise ArgumentError(f"interpolate: input size {n} and output size {out} of dim {d} must be positive")
            if mode == "nearest":
                x = _resize_nearest(x, d, out, factor)
            else:
                x = _resize_linear(x, d, out, factor, bool(align_corners))
        return x


# ---- small tensors and checks ----


def _arange(n: int, device: str) -> Tensor:
    from glassgrad.tensor import Tensor

    return Tensor.arange(n, device=device)


def _bool_ones(shape: tuple[int, ...], device: str) -> Tensor:
    from glassgrad.tensor import Tensor

    return Tensor.ones(shape, dtype=dtypes.bool, device=device)


def _positions(t: Tensor, values: list[int]) -> Tensor:
    """A 1-d int32 index tensor on t's device."""
    from glassgrad.tensor import Tensor

    return Tensor(values, device=t.device, dtype=dtypes.int32) if values else _arange(0, t.device)


def _full_like_scalar(t: Tensor, value: Any) -> Tensor:
    """A 0-d tensor of t's dtype and device: it broadcasts against anything."""
    from glassgrad.tensor import Tensor

    return Tensor(truncate(t.dtype, value), device=t.device, dtype=t.dtype)


def _masked_sum(mask: Tensor, values: Tensor, axis: int) -> Tensor:
    """The sum over `axis` of the values where mask is true: with a one-hot mask, the one value it picks."""
    return mask.where(values, _full_like_scalar(values, 0)).sum(axis).cast(values.dtype)


def _check_index_tensor(index: Any, op: str, what: str) -> None:
    from glassgrad.tensor import Tensor

    if not isinstance(index, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(index).__name__}")
    if not dtypes.is_int(index.dtype):
        raise DtypeError(f"{op}: {what} must be an integer tensor, got {index.dtype}")


def _tensor_list(first: Any, rest: tuple, op: str) -> list[Tensor]:
    """The tensors of a.cat(b, c), Tensor.cat(a, b) or Tensor.cat([a, b])."""
    from glassgrad.tensor import Tensor

    items: list[Any] = []
    for item in (first, *rest):
        items.extend(item) if isinstance(item, (list, tuple)) else items.append(item)
    if not items:
        raise ArgumentError(f"{op}: expected a non-empty list of tensors")
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: item {i} is a {type(t).__name__}, not a Tensor")
    return items


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


# ---- parsing an index ----


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
    from glassgrad.tensor import Tensor

    if item is None or item is Ellipsis or isinstance(item, (bool, int, slice, list)):
        return item
    if isinstance(item, tuple):
        return list(item)
    if isinstance(item, Tensor):
        if item.dtype != dtypes.bool and not dtypes.is_int(item.dtype):
            raise IndexError(f"index: tensors used as indices must be integer or bool tensors, got {item.dtype}")
        if item.device != t.device:
            raise IndexError(f"index: the index tensor is on {item.device} but the tensor is on {t.device}")
        return bool(item.item()) if item.ndim == 0 and item.dtype == dtypes.bool else item
    if hasattr(item, "__array_interface__"):
        return _normalize_item(t, Tensor(item, device=t.device))
    if hasattr(item, "__index__"):
        return operator.index(item)
    raise IndexError(f"index: {item!r} of type {type(item).__name__} is not a valid index; use ints, slices, None, "
                     "..., lists, or integer or bool tensors")  # fmt: skip


def _dims_used(item: Any) -> int:
    """How many dims of the tensor an index element consumes."""
    from glassgrad.tensor import Tensor

    if isinstance(item, Tensor) and item.dtype == dtypes.bool:
        return item.ndim
    if isinstance(item, list) and _is_bool_list(item):
        return _nested_depth(item)
    return 0 if item is None or item is Ellipsis or isinstance(item, bool) else 1


def _list_index(t: Tensor, item: list, dim: int) -> Tensor:
    """A list in an index: of bools a mask, of ints positions (checked here, since they are known on the host)."""
    from glassgrad.tensor import Tensor

    if _is_bool_list(item):
        return Tensor(item, device=t.device, dtype=dtypes.bool)
    item = positions(item, Tensor)
    values = _leaves(item)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise IndexError(f"index: a list index must hold only ints or only bools, got {item!r}")
    for v in values:
        if not -t.shape[dim] <= v < t.shape[dim]:
            raise IndexError(f"index: index {v} is out of bounds for dimension {dim} with size {t.shape[dim]}")
    return Tensor(item, device=t.device, dtype=dtypes.int32) if values else _positions(t, [])


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
    from glassgrad.tensor import Tensor

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
    has_tensor = any(isinstance(i, (Tensor, list)) for i in items)
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


# ---- basic indexing: movement ops, and their inverse for writes ----


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


# ---- advanced indexing: one-hot gathers, and last-write-wins scatters for writes ----


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
            idx = checked_index(idx, size, out_of_bounds("index", position, size), negative=True)
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
        onehot = self.flat.unsqueeze(-1) == _arange(self.total, y.device)
        onehot = onehot.reshape((1,) * kept + self.index_shape + (self.total,)).permute(order)
        return _masked_sum(onehot, lined_up, -1)

    def place(self, value: Tensor, y_shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """value (of the result's shape) where the index puts it in a tensor of y_shape, and a mask of the places."""
        n, device = prod(self.index_shape), value.device
        values = value.permute(_inverse(self.result_order)).reshape(self.kept_shape + (n, 1))
        entry = _arange(n, device).reshape(n, 1)
        names = self.flat.reshape(n, 1) == _arange(self.total, device).reshape(1, self.total)
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


# ---- writes: t[index] = value ----


def _as_value(value: Any, t: Tensor, op: str) -> Tensor:
    from glassgrad.tensor import Tensor

    if isinstance(value, Tensor):
        if value.device != t.device:
            raise ArgumentError(f"{op}: value is on {value.device} but the tensor is on {t.device}")
        return value.cast(t.dtype)
    if not isinstance(value, (bool, int, float, list, tuple)) and not hasattr(value, "__array_interface__"):
        raise TypeError(f"{op}: value must be a tensor, a number or a nested list, got {type(value).__name__}")
    return Tensor(value, device=t.device, dtype=t.dtype)


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
    from glassgrad.tensor import Tensor

    mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool or not 1 <= mask.ndim <= old.ndim:
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
    placed, written = selection.place(value, y_shape) if selection else (value, _bool_ones(y_shape, old.device))
    return plan.place(written).where(plan.place(placed), old)


def _has_storage(node: UOp) -> bool:
    """A buffer, a view of one, or a pending write into one: something setitem can write into in place."""
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op in (Ops.BUFFER, Ops.ASSIGN)


# ---- scatter ----


def _scatter_src(t: Tensor, dim: int, index: Tensor, src: Any, op: str) -> Tensor:
    """Check a scatter's arguments; the part of src that index covers (a number fills index's shape)."""
    from glassgrad.tensor import Tensor

    _check_index_tensor(index, op, "index")
    if index.ndim != t.ndim:
        raise ArgumentError(f"{op}: index has {index.ndim} dimensions but the tensor has {t.ndim}; they must match")
    for d, (i, s) in enumerate(zip(index.shape, t.shape, strict=True)):
        if d != dim and i > s:
            raise ArgumentError(f"{op}: index has shape {index.shape} but the tensor has {t.shape}; index can't be "
                                f"bigger in dimension {d} (other than dim={dim})")  # fmt: skip
    if not isinstance(src, Tensor):
        return Tensor.full(index.shape, src, dtype=t.dtype, device=t.device)
    if src.dtype != t.dtype:
        raise DtypeError(f"{op}: src has dtype {src.dtype} but the tensor has {t.dtype}; they must match")
    if src.ndim != t.ndim or any(i > s for i, s in zip(index.shape, src.shape, strict=True)):
        raise ArgumentError(f"{op}: src has shape {src.shape} but index has {index.shape}; src needs as many dims and "
                            "at least index's size in each")  # fmt: skip
    return src.shrink(tuple((0, i) for i in index.shape))


class _ScatterParts:
    """A scatter along `dim` lined up with dim last: mask[..., i, p] says that src[..., i] goes to place p."""

    def __init__(self, t: Tensor, dim: int, index: Tensor, src: Tensor, op: str):
        self.order = [d for d in range(t.ndim) if d != dim] + [dim]
        self.target = t.permute(self.order)
        index = checked_index(index, t.shape[dim], out_of_bounds(op, dim, t.shape[dim]))
        mask = index.permute(self.order).unsqueeze(-1) == _arange(t.shape[dim], t.device)
        # index may be smaller than the tensor in the other dims: the places it does not reach get nothing
        grow = tuple((0, full - part) for part, full in zip(mask.shape[:-2], self.target.shape[:-1], strict=True))
        self.mask = mask.pad(grow + ((0, 0), (0, 0)))
        self.src = src.permute(self.order).unsqueeze(-1).pad(grow + ((0, 0), (0, 0)))

    def finish(self, lined_up: Tensor) -> Tensor:
        return lined_up.permute(_inverse(self.order))


# ---- triangles, padding and resizing ----


def _triangle(t: Tensor, diagonal: int, op: str) -> Tensor:
    if t.ndim < 2:
        raise ArgumentError(f"{op}: the tensor has shape {t.shape}; it needs at least 2 dimensions")
    rows, cols = t.shape[-2:]
    offset = _arange(cols, t.device).reshape(1, cols) - _arange(rows, t.device).reshape(rows, 1)
    keep = offset >= diagonal if op == "triu" else offset <= diagonal
    return keep.where(t, _full_like_scalar(t, 0))


def _pad_pairs(t: Tensor, padding: Sequence[Any]) -> tuple[tuple[int, int], ...]:
    """A (before, after) pair per dim, from a flat PyTorch-style list (last dim first) or from pairs."""
    padding = list(padding)
    if all(isinstance(p, int) and not isinstance(p, bool) for p in padding):
        if len(padding) % 2 or len(padding) // 2 > t.ndim:
            raise ArgumentError(f"pad: a flat padding needs an even length of at most {2 * t.ndim} for a tensor of "
                                f"shape {t.shape}, got {tuple(padding)}")  # fmt: skip
        pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)]
        return tuple([(0, 0)] * (t.ndim - len(pairs)) + pairs[::-1])
    if len(padding) != t.ndim:
        raise ArgumentError(f"pad: need one (before, after) pair per dimension of {t.shape}, got {padding}")
    for p in padding:
        if p is not None and not (isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(v, int) for v in p)):
            raise ArgumentError(f"pad: each entry must be None or a (before, after) pair of ints, got {p!r}")
    return tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)


def _pad_dim(x: Tensor, d: int, before: int, after: int, mode: str) -> Tensor:
    """x padded along dim d by reflecting, replicating the edge, or wrapping around (circular)."""
    n = x.shape[d]

    def part(start: int, end: int) -> Tensor:
        return x.shrink(tuple((start, end) if i == d else None for i in range(x.ndim)))

    if mode == "circular":  # three copies end to end, read from n - before: a view
        if before > n or after > n:
            raise ArgumentError(f"pad: circular padding ({before}, {after}) of dimension {d} must be at most its "
                                f"size {n}")  # fmt: skip
        thrice = x.unsqueeze(d).expand(x.shape[:d] + (3,) + x.shape[d:]).flatten(d, d + 1)
        return thrice.shrink(tuple((n - before, 2 * n + after) if i == d else None for i in range(x.ndim)))
    if mode == "reflect":
        if before >= n or after >= n:
            raise ArgumentError(f"pad: reflect padding ({before}, {after}) of dimension {d} must be less than its "
                                f"size {n}")  # fmt: skip
        left, right = part(1, before + 1).flip(d), part(n - 1 - after, n - 1).flip(d)
    else:
        if n == 0:
            raise ArgumentError(f"pad: replicate padding needs dimension {d} to be non-empty, got shape {x.shape}")
        left = part(0, 1).expand(x.shape[:d] + (before,) + x.shape[d + 1 :])
        right = part(n - 1, n).expand(x.shape[:d] + (after,) + x.shape[d + 1 :])
    return left.cat(x, right, dim=d)


def _f32(v: float) -> float:
    """v rounded to float32: PyTorch computes resize coordinates in float32, and so do we, to pick the same pixels."""
    return truncate(dtypes.float32, v)


def _input_scale(n_in: int, n_out: int, factor: float | None) -> float:
    """Output to input coordinates: 1/scale_factor when one was given, else in/out (PyTorch's rule)."""
    return _f32(1.0 / factor) if factor is not None and factor > 0 else _f32(n_in / n_out)


def _resize_nearest(x: Tensor, d: int, out: int, factor: float | None) -> Tensor:
    n = x.shape[d]
    if out == n:
        return x
    scale = _input_scale(n, out, factor)
    src = [i >> 1 if out == 2 * n else min(math.floor(_f32(i * scale)), n - 1) for i in range(out)]
    if out % n == 0 and src == [i // (out // n) for i in range(out)]:  # every element k times in a row: a view
        k = out // n
        return x.unsqueeze(d + 1).expand(x.shape[: d + 1] + (k,) + x.shape[d + 1 :]).flatten(d, d + 1)
    step = src[1] - src[0] if out > 1 else 1
    if step > 0 and src == list(range(src[0], src[0] + step * out, step)):  # evenly spaced: a strided view
        return x[(slice(None),) * d + (slice(src[0], src[0] + step * (out - 1) + 1, step),)]
    return x[(slice(None),) * d + (_positions(x, src),)]


def _resize_linear(x: Tensor, d: int, out: int, factor: float | None, align_corners: bool) -> Tensor:
    """out[o] = x[i0] * w0 + x[i1] * w1 along d, as PyTorch picks i0, i1 and the weights; a sum over a sparse matrix."""
    from glassgrad.tensor import Tensor

    n = x.shape[d]
    if out == n:
        return x
    if align_corners:
        scale = _f32((n - 1) / (out - 1)) if out > 1 else 0.0
    else:
        scale = _input_scale(n, out, factor)
    low, high, low_weight, high_weight = [], [], [], []
    for o in range(out):
        real = _f32(scale * o) if align_corners else max(_f32(_f32(scale * _f32(o + 0.5)) - 0.5), 0.0)
        i0 = min(math.floor(real), n - 1)
        lam = min(max(_f32(real - i0), 0.0), 1.0)
        low.append(i0)
        high.append(i0 + (1 if i0 < n - 1 else 0))
        low_weight.append(_f32(1.0 - lam))
        high_weight.append(lam)

    def column(values: list[Any], dtype: Any) -> Tensor:
        return Tensor(values, device=x.device, dtype=dtype).reshape(out, 1)

    s = _arange(n, x.device).reshape(1, n)
    weights = (s == column(low, dtypes.int32)).where(column(low_weight, dtypes.float32), 0.0) + (
        s == column(high, dtypes.int32)).where(column(high_weight, dtypes.float32), 0.0)  # fmt: skip
    resized = (x.transpose(d, -1).unsqueeze(-2) * weights).sum(-1)  # (..., 1, n) * (out, n), summed over n
    return resized.cast(x.dtype if dtypes.is_float(x.dtype) else dtypes.default_float).transpose(d, -1)
