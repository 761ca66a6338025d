"""Tensor methods for dot products, matmul and einsum.

There is no matmul primitive: a product of (n, k) and (k, m) is the broadcast multiply of (n, 1, k) and (1, m, k)
summed over k, which the scheduler fuses into one kernel whose inner loop walks k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from glassgrad.autocast import contraction_operands
from glassgrad.dtype import DType, dtypes, promote_types, to_dtype
from glassgrad.errors import ArgumentError, DtypeError
from glassgrad.shape import broadcast_shape

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _as_tensor(value: Any, like: Tensor, op: str) -> Tensor:
    """A matmul operand as a Tensor on `like`'s device; Python scalars are rejected as PyTorch does."""
    if isinstance(value, type(like)):
        if value.device != like.device:
            raise ArgumentError(f"{op}: tensors are on different devices: {like.device} and {value.device}; "
                                "move one with .to()")  # fmt: skip
        return value
    if isinstance(value, (bool, int, float)):
        raise TypeError(f"{op}: needs tensors of at least 1 dimension, got a Python {type(value).__name__}; "
                        "use * to scale by a number")  # fmt: skip
    return type(like)(value, device=like.device)


def _broadcasts_to(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) <= len(big) and all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))


def _summed(x: Tensor, y: Tensor | None, axis: int | tuple[int, ...], dtype: DType | None, result: DType) -> Tensor:
    """x * y (x alone when y is None) summed over `axis`, of the `result` dtype unless `dtype` says otherwise; 16-bit
    floats are multiplied and summed in float32 (their products exact) and rounded once, as PyTorch does."""
    wide = dtypes.float32 if dtype is None and result in (dtypes.float16, dtypes.bfloat16) else result
    if y is not None:  # broadcast before the casts: a cast under the broadcast hides the loads' views (tensor cores)
        x, y = x._binary_operands(y, "matmul")
    product = x.cast(wide) if y is None else x.cast(wide) * y.cast(wide)
    return product.sum(axis, dtype=dtype) if dtype is not None else product.sum(axis).cast(result)


class LinalgMixin:
    """Tensor methods for dot products, matmul and einsum."""

    def matmul(self: Tensor, other: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
        """Matrix product with torch.matmul's rules: 1-D operands, batched, batch dims broadcast."""
        x, w = self, _as_tensor(other, self, "matmul")
        if reverse:
            x, w = w, x
        x, w = contraction_operands(x, w)  # autocast's 16-bit operands, where one is on
        if x.ndim == 0 or w.ndim == 0:
            raise ArgumentError(f"matmul: both arguments need at least 1 dimension, got shapes {x.shape} and {w.shape}")
        result = promote_types(x.dtype, w.dtype)
        if result == dtypes.bool:
            raise DtypeError("matmul: bool tensors are not supported; cast them to an integer or float dtype")
        dtype = to_dtype(dtype) if dtype is not None else None
        x2 = x.reshape(1, x.shape[0]) if x.ndim == 1 else x
        w2 = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
        (n, k), (k2, m) = x2.shape[-2:], w2.shape[-2:]
        if k != k2:
            raise ArgumentError(f"matmul: inner dimensions differ: {x.shape} @ {w.shape} ({k} != {k2})")
        operands = f"batch dimensions of {x.shape} and {w.shape}"
        batch = broadcast_shape(x2.shape[:-2], w2.shape[:-2], "matmul", operands, trailing=2)
        rows = x2.reshape(*x2.shape[:-2], n, 1, k)
        cols = w2.transpose(-1, -2).reshape(*w2.shape[:-2], 1, m, k)
        out = _summed(rows, cols, -1, dtype, result)
        return out.reshape(*batch, *((n,) if x.ndim > 1 else ()), *((m,) if w.ndim > 1 else ()))

    def dot(self: Tensor, other: Tensor, dtype: DType | str | None = None) -> Tensor:
        """Inner product of 1-D tensors (torch.dot); for higher ranks the same as matmul (tinygrad's dot)."""
        return self.matmul(other, dtype=dtype)

    def __matmul__(self: Tensor, other: Tensor) -> Tensor:
        """self @ other."""
        return self.matmul(other)

    def __rmatmul__(self: Tensor, other: Any) -> Tensor:
        """other @ self, for a left operand that is not a Tensor."""
        return self.matmul(other, reverse=True)

    @staticmethod
    def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | str | None = None) -> Tensor:
        """Sums of products named by subscripts, as torch.einsum: 'ij,jk->ik', 'ii->i', 'bij->bji', '...ij->...'."""
        tensors = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
        if not tensors:
            raise ArgumentError("einsum: needs at least one operand")
        for i, t in enumerate(tensors):
            if not isinstance(t, LinalgMixin):
                raise TypeError(f"einsum: operand {i} is a {type(t).__name__}, not a Tensor")
            if t.device != tensors[0].device:
                raise ArgumentError(f"einsum: operands are on different devices: {tensors[0].device} and {t.device}")
        lhs, arrow, rhs = formula.replace(" ", "").partition("->")
        terms = lhs.split(",")
        if len(terms) != len(tensors):
            raise ArgumentError(f"einsum: {formula!r} names {len(terms)} operands but {len(tensors)} tensors were "
                                "given")  # fmt: skip
        inputs = [_parse_term(term, t.ndim, i) for i, (term, t) in enumerate(zip(terms, tensors, strict=True))]
        rank = max(sum(c.startswith(".") for c in labels) for labels in inputs)
        output = _output_labels(rhs if arrow else None, inputs, [f".{rank - 1 - i}" for i in range(rank)])
        result = tensors[0].dtype
        for t in tensors[1:]:
            result = promote_types(result, t.dtype)
        if result == dtypes.bool:
            raise DtypeError("einsum: bool tensors are not supported; cast them to an integer or float dtype")
        dtype = to_dtype(dtype) if dtype is not None else None
        pairs = [_diagonal(t.cast(result), labels) for t, labels in zip(tensors, inputs, strict=True)]
        _label_sizes(pairs)

        # sum each operand's private labels first, then fold the operands in left to right as pairwise contractions
        for i, (x, labels) in enumerate(pairs):
            elsewhere = set(output).union(*(ls for j, (_, ls) in enumerate(pairs) if j != i))
            pairs[i] = _contract(x, labels, None, [], elsewhere, dtype, result)
        x, labels = pairs[0]
        for i in range(1, len(pairs)):
            later = set(output).union(*(ls for _, ls in pairs[i + 1 :]))
            x, labels = _contract(x, labels, *pairs[i], later, dtype, result)
        return _aligned(x, labels, output).cast(result if dtype is None else dtype)

    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
        """x @ weight.T + bias, weight (out_features, in_features) as PyTorch's; a 1-d weight scales each feature."""
        weight = _as_tensor(weight, self, "linear")
        if self.ndim == 0:
            raise ArgumentError("linear: the input needs at least 1 dimension (features last), got a 0-d tensor")
        if weight.ndim not in (1, 2):
            raise ArgumentError(f"linear: weight must be (out_features, in_features), or (in_features,) to scale each "
                                f"feature, got shape {weight.shape}")  # fmt: skip
        if self.shape[-1] != weight.shape[-1]:
            raise ArgumentError(f"linear: input has {self.shape[-1]} features (last dim of {self.shape}) but weight "
                                f"{weight.shape} expects {weight.shape[-1]}")  # fmt: skip
        if weight.ndim == 1:  # tinygrad's elementwise form (PyTorch refuses a 1-d weight)
            out = self * weight if dtype is None else self.cast(dtype) * weight.cast(dtype)
        else:
            out = self.matmul(weight.T, dtype=dtype)
        if bias is None:
            return out
        (bias,) = contraction_operands(_as_tensor(bias, self, "linear"))  # the output's dtype under autocast
        if not _broadcasts_to(bias.shape, out.shape):
            raise ArgumentError(f"linear: bias of shape {bias.shape} cannot broadcast to the output shape {out.shape}")
        return out + bias


def _parse_term(term: str, ndim: int, operand: int) -> list[str]:
    """One operand's subscripts as a label per dimension; '...' becomes labels '.0', '.1', ... aligned right."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ArgumentError(f"einsum: operand {operand}'s subscripts {term!r} have a malformed or repeated '...'")
    for c in term.replace("...", ""):
        if not c.isascii() or not c.isalpha():
            raise ArgumentError(f"einsum: subscript {c!r} in {term!r} is not a letter (a-z, A-Z)")
    letters = term.replace("...", "")
    if "..." not in term:
        if len(letters) != ndim:
            raise ArgumentError(f"einsum: operand {operand} has {ndim} dimensions but subscripts {term!r} "
                                f"name {len(letters)}")  # fmt: skip
        return list(letters)
    extra = ndim - len(letters)
    if extra < 0:
        raise ArgumentError(f"einsum: operand {operand} has {ndim} dimensions, fewer than the {len(letters)} letters "
                            f"of {term!r}")  # fmt: skip
    before, after = term.split("...")
    return list(before) + [f".{extra - 1 - i}" for i in range(extra)] + list(after)


def _diagonal(x: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """Merge repeated labels of one operand by taking diagonals: 'ii' reads x[i, i], as a view."""
    while (label := next((c for c in labels if labels.count(c) > 1), None)) is not None:
        first, second = (i for i, c in enumerate(labels) if c == label)
        n, m = x.shape[first], x.shape[second]
        if n != m:
            raise ArgumentError(f"einsum: subscript {label!r} is repeated in an operand but its sizes differ "
                                f"({n} != {m})")  # fmt: skip
        rest = [i for i in range(x.ndim) if i not in (first, second)]
        x = x.permute(*rest, first, second)
        # x[..., i, i] sits at i * (n + 1) in the flattened pair: pad by n, split into rows of n + 1, keep column 0
        flat = x.reshape(*x.shape[:-2], n * n).pad(((0, 0),) * (x.ndim - 2) + ((0, n),))
        x = flat.reshape(*flat.shape[:-1], n, n + 1)[..., 0]
        labels = [labels[i] for i in rest] + [label]
    return x, labels


def _aligned(x: Tensor, labels: list[str], order: list[str]) -> Tensor:
    """x with its dims permuted to follow `order`, and size-1 dims for the labels it lacks."""
    present = [c for c in order if c in labels]
    x = x.permute(*(labels.index(c) for c in present))
    sizes = dict(zip(present, x.shape, strict=True))
    return x.reshape(*(sizes.get(c, 1) for c in order))


def _contract(x: Tensor, lx: list[str], y: Tensor | None, ly: list[str], keep: set[str], dtype: DType | None,
              result: DType) -> tuple[Tensor, list[str]]:  # fmt: skip
    """Multiply two operands (or take one) and sum the labels not in `keep`; summed labels go last, innermost."""
    labels = list(dict.fromkeys(lx + ly))
    kept, summed = [c for c in labels if c in keep], [c for c in labels if c not in keep]
    order = kept + summed
    axes = tuple(range(len(kept), len(order)))
    if y is None:
        return (_summed(_aligned(x, lx, order), None, axes, dtype, result), kept) if summed else (x, lx)
    return _summed(_aligned(x, lx, order), _aligned(y, ly, order), axes, dtype, result), kept


def _output_labels(rhs: str | None, inputs: list[list[str]], ellipsis: list[str]) -> list[str]:
    """The output's labels: as written after '->', else the ellipsis dims then the letters used once, sorted."""
    used = [c for labels in inputs for c in labels if not c.startswith(".")]
    if rhs is None:
        return ellipsis + sorted(c for c in set(used) if used.count(c) == 1)
    if rhs.count("...") > 1 or "." in rhs.replace("...", ""):
        raise ArgumentError(f"einsum: the output subscripts {rhs!r} have a malformed or repeated '...'")
    for c in rhs.replace("...", ""):
        if c not in used:
            raise ArgumentError(f"einsum: output subscript {c!r} does not appear in any input")
        if rhs.count(c) > 1:
            raise ArgumentError(f"einsum: output subscript {c!r} appears more than once in {rhs!r}")
    if "..." not in rhs:
        return list(rhs)
    before, after = rhs.split("...")
    return list(before) + ellipsis + list(after)


def _label_sizes(pairs: list[tuple[Tensor, list[str]]]) -> None:
    """Each label must have one size across the operands (or size 1, which broadcasts)."""
    seen: dict[str, tuple[int, int]] = {}
    for i, (x, labels) in enumerate(pairs):
        for c, size in zip(labels, x.shape, strict=True):
            if c not in seen or seen[c][0] == 1:
                seen[c] = (size, i)
            elif size not in (1, seen[c][0]):
                name = "the '...' dims have" if c.startswith(".") else f"subscript {c!r} has"
                raise ArgumentError(f"einsum: {name} size {seen[c][0]} in operand {seen[c][1]} but {size} in "
                                    f"operand {i}")  # fmt: skip
