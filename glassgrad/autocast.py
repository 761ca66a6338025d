"""Mixed precision as torch.autocast does it: inside `autocast`, contractions compute in a 16-bit float.

The model keeps float32 weights (and the optimizer float32 state); under autocast a matmul, linear layer or
convolution casts its float32 operands to float16 or bfloat16 (the tensor cores' types) and returns that type, while
the ops whose accuracy needs the range or the bits (softmax, log_softmax, logsumexp, the normalizations, the losses)
cast a 16-bit input up to float32 first. Every other op keeps its inputs' dtypes, so the activations between
contractions stay 16-bit. The gradient of each cast is the cast back: the weights' gradients arrive in float32.
float64 operands are never cast (as in PyTorch). Nothing here knows Tensor: the hooks take and return tensors.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from glassgrad.dtype import DType, dtypes, to_dtype

F = TypeVar("F", bound=Callable[..., Any])
SIXTEEN_BIT = (dtypes.float16, dtypes.bfloat16)

_stack: list[DType | None] = []  # the dtype of each entered autocast, innermost last (None: entered disabled)


class autocast(contextlib.ContextDecorator):
    """Run contractions (matmul, linear, conv) in `dtype` inside a with-block or decorated function (torch.autocast)."""

    def __init__(self, device_type: str | None = None, dtype: DType | str | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:  # fmt: skip
        # PyTorch's defaults: float16 on a GPU, bfloat16 on the CPU (and where the device is not named)
        gpu = device_type is not None and device_type.split(":")[0].upper() in ("CUDA", "GPU", "NV")
        self.dtype = to_dtype(dtype) if dtype is not None else dtypes.float16 if gpu else dtypes.bfloat16
        if self.dtype not in SIXTEEN_BIT:
            raise TypeError(f"autocast: dtype must be float16 or bfloat16, got {self.dtype}")
        self.enabled = enabled

    def __enter__(self) -> autocast:
        _stack.append(self.dtype if self.enabled else None)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack.pop()


def autocast_dtype() -> DType | None:
    """The 16-bit dtype contractions compute in now, or None outside autocast (or inside a disabled one)."""
    return _stack[-1] if _stack else None


def is_autocast_enabled() -> bool:
    """True inside an enabled autocast (torch.is_autocast_enabled)."""
    return autocast_dtype() is not None


def contraction_operands(*operands: Any) -> tuple[Any, ...]:
    """The operands of a matmul/linear/conv as autocast wants them: float32 (and the other 16-bit type) cast to the
    autocast dtype; float64, integers and None as they are."""
    low = autocast_dtype()
    if low is None:
        return operands
    return tuple(_cast(t, low) for t in operands)


def _cast(t: Any, low: DType) -> Any:
    dtype = getattr(t, "dtype", None)
    if dtype is None or dtype == low or not dtypes.is_float(dtype) or dtype == dtypes.float64:
        return t
    # stored as its own 16-bit copy, as PyTorch's autocast makes one: each element of a contraction's operand is read
    # by every tile on the other side, and a cast in the contraction's loads reads the wide value (and converts it)
    # each time (H200, bf16 1024x768 @ 768x3072: 85 us with the cast in the loads, 65 us from a copy, 58 us bf16)
    return t.cast(low).contiguous()


def float32_under_autocast(method: F) -> F:
    """Decorate a Tensor method whose 16-bit input autocast computes in float32 (softmax, norms, losses)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if autocast_dtype() is not None and self.dtype in SIXTEEN_BIT:
            self = self.cast(dtypes.float32)
        return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["autocast", "autocast_dtype", "is_autocast_enabled", "contraction_operands", "float32_under_autocast"]
