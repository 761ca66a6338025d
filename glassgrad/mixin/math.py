"""Tensor methods for elementwise math and activation functions."""

from __future__ import annotations


class MathMixin:
    """Tensor methods for elementwise math and activation functions."""
