"""Tensor methods that chain functions of tensors: sequential, as tinygrad's (torch.nn.Sequential as a method)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor


class CompositionMixin:
    """Tensor methods that chain functions."""

    def sequential(self: Tensor, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
        """Apply each function of `ll` to the result of the one before, starting from this tensor (tinygrad's)."""
        return functools.reduce(lambda x, f: f(x), ll, self)
