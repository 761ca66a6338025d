"""The Tensor API beyond its core, one area per file; Tensor inherits every mixin here.

Each mixin builds only on Tensor's core methods (elementwise ops, reductions, movement), so a method's
gradient comes from the primitive ops it is made of.
"""

from glassgrad.mixin.autograd import AutogradMixin
from glassgrad.mixin.composition import CompositionMixin
from glassgrad.mixin.indexing import IndexingMixin
from glassgrad.mixin.linalg import LinalgMixin
from glassgrad.mixin.math import MathMixin
from glassgrad.mixin.nn import NNMixin
from glassgrad.mixin.random import RandomMixin
from glassgrad.mixin.reduce import ReduceMixin

__all__ = ["AutogradMixin", "CompositionMixin", "IndexingMixin", "LinalgMixin", "MathMixin", "NNMixin", "RandomMixin",
           "ReduceMixin"]  # fmt: skip
