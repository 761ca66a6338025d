"""Tensor methods for gathering, scattering, joining and splitting tensors, and advanced indexing."""

from __future__ import annotations


class IndexingMixin:
    """Tensor methods for gathering, scattering, joining and splitting tensors, and advanced indexing."""
