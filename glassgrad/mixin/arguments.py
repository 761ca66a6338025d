"""Optional arguments of the nn functions (weight, bias, target, ...) as tensors on the input's device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glassgrad.errors import ArgumentError

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


def _nn_tensor(value: Any, like: Tensor, op: str, name: str) -> Tensor | None:
    """An optional argument (weight, bias, target, ...) as a Tensor on `like`'s device; None stays None."""
    if value is None:
        return None
    if not isinstance(value, type(like)):
        return type(like)(value, device=like.device)
    if value.device != like.device:
        raise ArgumentError(f"{op}: {name} is on {value.device} but the input is on {like.device}; move it with .to()")
    return value


def _required_tensor(value: Any, like: Tensor, op: str, name: str) -> Tensor:
    """An argument that must be given (a convolution's weight, a loss's target) as a Tensor on `like`'s device."""
    if value is None:
        raise TypeError(f"{op}: {name} must be a tensor, got None")
    return _nn_tensor(value, like, op, name)


def _param_of_shape(value: Any, like: Tensor, shape: tuple[int, ...], op: str, name: str) -> Tensor | None:
    """A per-feature parameter (weight, bias, running stats) that must have exactly `shape`."""
    t = _nn_tensor(value, like, op, name)
    if t is not None and t.shape != shape:
        raise ArgumentError(f"{op}: {name} has shape {t.shape} but the input {like.shape} needs {shape}")
    return t
