"""Tensor methods for joining and splitting, repeating, triangles and diagonals, padding and resizing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import dtypes, promote_types, truncate
from glassgrad.errors import ArgumentError, DimensionError, ListAndTensorsError, UnsupportedModeError
from glassgrad.mixin import symbolic_shapes
from glassgrad.mixin.index import _take_every
from glassgrad.mixin.small_tensors import _arange, _bool_ones, _full_like_scalar, _positions
from glassgrad.shape import ShapeError, shape_arg
from glassgrad.uop.ops import Ops

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


PAD_MODES = ("constant", "reflect", "replicate", "circular")


# mode -> how many dims it resizes; tinygrad's "linear" resizes as many as `size` names (bilinear, trilinear)
INTERPOLATE_MODES = {"nearest": None, "nearest-exact": None, "linear": None, "bilinear": 2, "trilinear": 3}


def _tensor_list(first: Any, rest: tuple, op: str) -> list[Tensor]:
    """The tensors of a.cat(b, c), Tensor.cat(a, b) or Tensor.cat([a, b]): one list, or tensors one by one."""
    given = (first, *rest)
    if len(given) > 1 and any(isinstance(item, (list, tuple)) for item in given):
        raise ListAndTensorsError(f"{op}: pass the tensors as one list or one by one, not a list and more "
                            f"(Tensor.{op}([a, b], c)); dim is a keyword")  # fmt: skip
    items: list[Any] = []
    for item in given:
        items.extend(item) if isinstance(item, (list, tuple)) else items.append(item)
    if not items:
        raise ArgumentError(f"{op}: expected a non-empty list of tensors")
    for i, t in enumerate(items):
        if not isinstance(t, JoinMixin):
            raise TypeError(f"{op}: item {i} is a {type(t).__name__}, not a Tensor")
    return items


def _triangle(t: Tensor, diagonal: int, op: str) -> Tensor:
    if t.ndim < 2:
        raise ArgumentError(f"{op}: the tensor has shape {t.shape}; it needs at least 2 dimensions")
    rows, cols = t.shape[-2:]
    offset = _arange(cols, t).reshape(1, cols) - _arange(rows, t).reshape(rows, 1)
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


def _resize_nearest(x: Tensor, d: int, out: int, factor: float | None, exact: bool = False) -> Tensor:
    """PyTorch's nearest: source floor(i * scale); nearest-exact: the nearest centre, floor((i + 0.5) * scale)."""
    n = x.shape[d]
    if out == n:
        return x
    scale = _input_scale(n, out, factor)
    if exact:
        src = [min(math.floor(_f32((i + 0.5) * scale)), n - 1) for i in range(out)]
    else:
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
        return type(x)(values, device=x.device, dtype=dtype).reshape(out, 1)

    s = _arange(n, x).reshape(1, n)
    weights = (s == column(low, dtypes.int32)).where(column(low_weight, dtypes.float32), 0.0) + (
        s == column(high, dtypes.int32)).where(column(high_weight, dtypes.float32), 0.0)  # fmt: skip
    resized = (x.transpose(d, -1).unsqueeze(-2) * weights).sum(-1)  # (..., 1, n) * (out, n), summed over n
    return resized.cast(x.dtype if dtypes.is_float(x.dtype) else dtypes.default_float).transpose(d, -1)


class JoinMixin:
    """Tensor methods for joining and splitting, repeating, triangles and diagonals, padding and resizing."""

    def cat(self, *tensors: Tensor, dim: int = 0, axis: int | None = None) -> Tensor:
        """Join tensors along `dim`: a.cat(b), Tensor.cat(a, b) or Tensor.cat([a, b]); one kernel when realized."""
        parts = _tensor_list(self, tensors, "cat")
        first = next((t for t in parts if t.shape != (0,)), parts[0])
        parts = [t for t in parts if t.shape != (0,) or t.ndim == first.ndim]  # PyTorch skips other 1-d empties
        if first.ndim == 0:
            raise DimensionError("cat: zero-dimensional tensors cannot be concatenated; use stack")
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
            out = placed(_bool_ones(t.shape, t), start).where(placed(t, start), out)
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
        x, dim = (self.flatten(), 0) if dim is None else (self, self._axis(dim, "repeat_interleave"))
        n = x.shape[dim] if x.ndim else 1
        if isinstance(repeats, int):
            if repeats < 0:
                raise ShapeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
            counts = [repeats] * n
            copies = x.unsqueeze(dim + 1).expand(x.shape[: dim + 1] + (repeats,) + x.shape[dim + 1 :])
            out = copies.flatten(dim, dim + 1)
        else:
            counts = repeats.tolist() if isinstance(repeats, JoinMixin) else list(repeats)
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

    def pad(self, padding: Sequence[int] | Sequence[tuple[int, int] | None] | None = None, mode: str = "constant",
            value: float | None = None, *, pad: Sequence[int] | None = None) -> Tensor:  # fmt: skip
        """Pad as torch.nn.functional.pad (a flat list from the last dim) or with a (before, after) pair per dim."""
        if (padding is None) == (pad is None):
            raise TypeError("pad: pass the padding once, as `padding` or as `pad`")
        if symbolic_shapes.has_symbolic(padding if pad is None else pad) or symbolic_shapes.has_symbolic(self.shape):
            return symbolic_shapes.pad(self, padding if pad is None else pad, mode, value)
        pairs = _pad_pairs(self, padding if pad is None else pad)
        if mode not in PAD_MODES:
            raise UnsupportedModeError(f"pad: mode must be one of {', '.join(PAD_MODES)}, got {mode!r}")
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
        inside = _bool_ones(self.shape, self)._movement(Ops.PAD, pairs)
        return inside.where(padded, _full_like_scalar(self, value))

    def interpolate(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                    mode: str = "nearest", align_corners: bool | None = None,
                    recompute_scale_factor: bool | None = None) -> Tensor:  # fmt: skip
        """Resize as torch.nn.functional.interpolate: nearest, linear (any dims, as tinygrad), bilinear, trilinear."""
        if mode not in INTERPOLATE_MODES:
            raise UnsupportedModeError(f"interpolate: mode must be one of {', '.join(INTERPOLATE_MODES)}, got {mode!r}")
        if mode.startswith("nearest") and align_corners is not None:
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
            if mode.startswith("nearest"):
                x = _resize_nearest(x, d, out, factor, exact=mode == "nearest-exact")
            else:
                x = _resize_linear(x, d, out, factor, bool(align_corners))
        return x
