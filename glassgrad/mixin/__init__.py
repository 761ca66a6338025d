"""The Tensor API beyond its core, one area per file; Tensor inherits every mixin here.

Each mixin builds only on Tensor's core methods (elementwise ops, reductions, movement), so a method's
gradient comes from the primitive ops it is made of.
"""

from glassgrad.mixin.autograd import AutogradMixin
from glassgrad.mixin.construction import ConstructionMixin
from glassgrad.mixin.decompositions import DecompositionsMixin
from glassgrad.mixin.indexing import IndexingMixin
from glassgrad.mixin.linalg import LinalgMixin
from glassgrad.mixin.math import MathMixin
from glassgrad.mixin.more_math import MoreMathMixin
from glassgrad.mixin.nn import NNMixin
from glassgrad.mixin.random import RandomMixin
from glassgrad.mixin.rearrange import RearrangeMixin
from glassgrad.mixin.reduce import ReduceMixin
from glassgrad.mixin.search import SearchMixin
from glassgrad.mixin.spatial_nd import SpatialNdMixin
from glassgrad.mixin.torch_names import TorchNamesMixin


class UserNamesMixin(TorchNamesMixin, MoreMathMixin, SearchMixin, ConstructionMixin, DecompositionsMixin,
                     RearrangeMixin, SpatialNdMixin):  # fmt: skip
    """The names PyTorch and tinygrad users bring with them, beyond the core mixins (each file is one area)."""


# Tensor's bases, in this order: an earlier mixin's method wins over a later one's of the same name
MIXINS = (AutogradMixin, MathMixin, ReduceMixin, IndexingMixin, LinalgMixin, NNMixin, RandomMixin, UserNamesMixin)

__all__ = ["MIXINS", "AutogradMixin", "IndexingMixin", "LinalgMixin", "MathMixin", "NNMixin", "RandomMixin",
           "ReduceMixin", "UserNamesMixin"]  # fmt: skip
