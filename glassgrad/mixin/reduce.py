"""Tensor methods for reductions beyond sum and max: statistics, arg-reductions, cumulative ops, softmax, sorting."""

from __future__ import annotations


class ReduceMixin:
    """Tensor methods for reductions beyond sum and max: statistics, arg-reductions, cumulative ops, softmax, sorting."""
