"""Tensor methods for the neural-network functions: convolution, pooling, normalization, attention and losses."""

from __future__ import annotations


class NNMixin:
    """Tensor methods for the neural-network functions: convolution, pooling, normalization, attention and losses."""
