"""Tensor methods for random tensors and initializers."""

from __future__ import annotations


class RandomMixin:
    """Tensor methods for random tensors and initializers."""
