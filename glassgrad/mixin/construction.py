"""Tensors made by a rule: linspace (evenly spaced values), diag (a diagonal matrix, or a matrix's diagonal) and
randperm (a random permutation)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.dtype import DType, dtypes, to_dtype, truncate

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class ConstructionMixin:
    """linspace, diag, randperm."""

    @classmethod
    def linspace(cls, start: int | float, end: int | float, steps: int, dtype: DType | str | None = None,
                 device: str | None = None, **kwargs: Any) -> Tensor:  # fmt: skip
        """`steps` evenly spaced values from start to end, both included (float32 unless `dtype` says)."""
        # torch's rounding: the first half counts up from start, the second half down from end
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise RuntimeError(f"linspace: the number of steps must be a non-negative int, got {steps!r}")
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dtype == dtypes.bool:
            raise RuntimeError("linspace: bool is not a supported dtype; use a number dtype")
        # torch's precision: an int result from a float64 step between int ends, a float one in its own precision
        # (float32 for 16-bit floats); its vector lanes may round the last place differently on other CPUs
        working = dtypes.float64 if dtype == dtypes.float64 or not dtypes.is_float(dtype) else dtypes.float32
        ends = dtype if not dtypes.is_float(dtype) else working
        start, end = truncate(ends, start), truncate(ends, end)
        step = truncate(working, truncate(working, end - start) / (steps - 1)) if steps > 1 else 0.0
        i = cls.arange(steps, device=device, dtype=working)
        values = (i < max(steps // 2, 1)).where(start + i * step, end - (steps - 1 - i) * step)  # steps=1: start
        return values.cast(dtype).requires_grad_(kwargs.get("requires_grad"))

    def diag(self: Tensor, diagonal: int = 0) -> Tensor:
        """1-d: the square matrix with it on diagonal `diagonal` (above the main one if > 0); 2-d: that diagonal."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise RuntimeError(f"diag: expects a 1-d or 2-d tensor, got shape {self.shape}")
        n, k = self.shape[0], abs(diagonal)
        eye = type(self).eye(n, device=self.device, dtype=dtypes.bool)
        square = eye.where(self.unsqueeze(0).expand(n, n), 0)  # row i holds x[i] at column i
        return square.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))

    @classmethod
    def randperm(cls, n: int, device: str | None = None, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
        """A random permutation of 0 .. n-1 (int32 unless `dtype` says); realizes n random keys to sort them."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise RuntimeError(f"randperm: n must be a non-negative int, got {n!r}")
        keys = cls.randint(n, low=0, high=2**32, dtype=dtypes.int64, device=device).tolist() if n else []
        order = sorted(range(n), key=lambda i: (keys[i], i))
        permutation = cls(order, device=device, dtype=dtype or dtypes.int32).reshape(n)
        return permutation.requires_grad_(kwargs.get("requires_grad"))
