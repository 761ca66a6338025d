"""Tensor methods for dot products, matmul and einsum."""

from __future__ import annotations


class LinalgMixin:
    """Tensor methods for dot products, matmul and einsum."""
