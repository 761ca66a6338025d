"""The Tensor API beyond its core, one area per file; Tensor inherits every mixin here.

Each mixin builds only on Tensor's core methods (elementwise ops, reductions, movement), so a method's
gradient comes from the primitive ops it is made of. No mixin imports tensor.py (which imports them): a mixin
reaches the Tensor class through the tensors it is given (`type(x).arange(...)`, `self._derived(...)`), and tests
for a tensor with `isinstance(x, <its own mixin>)`, since Tensor is the one class that inherits them.
"""

from glassgrad.mixin.attention import AttentionMixin
from glassgrad.mixin.autograd import AutogradMixin
from glassgrad.mixin.composition import CompositionMixin
from glassgrad.mixin.construction import ConstructionMixin
from glassgrad.mixin.conv import ConvMixin
from glassgrad.mixin.decompositions import DecompositionsMixin
from glassgrad.mixin.elementwise import ElementwiseMixin
from glassgrad.mixin.gather import GatherMixin
from glassgrad.mixin.index import IndexMixin
from glassgrad.mixin.join import JoinMixin
from glassgrad.mixin.linalg import LinalgMixin
from glassgrad.mixin.loss import LossMixin
from glassgrad.mixin.math import MathMixin
from glassgrad.mixin.more_math import MoreMathMixin
from glassgrad.mixin.movement import MovementMixin
from glassgrad.mixin.norm import NormMixin
from glassgrad.mixin.pool import PoolMixin
from glassgrad.mixin.random import RandomMixin
from glassgrad.mixin.rearrange import RearrangeMixin
from glassgrad.mixin.reduce import ReduceMixin
from glassgrad.mixin.search import SearchMixin
from glassgrad.mixin.shard import ShardMixin
from glassgrad.mixin.spatial_nd import SpatialNdMixin
from glassgrad.mixin.torch_names import TorchNamesMixin


class UserNamesMixin(TorchNamesMixin, MoreMathMixin, SearchMixin, ConstructionMixin, DecompositionsMixin,
                     RearrangeMixin, SpatialNdMixin, ShardMixin):  # fmt: skip
    """The names PyTorch and tinygrad users bring with them, beyond the core mixins (each file is one area)."""


__all__ = ["AttentionMixin", "AutogradMixin", "CompositionMixin", "ConvMixin", "ElementwiseMixin", "GatherMixin",
           "IndexMixin", "JoinMixin", "LinalgMixin", "LossMixin", "MathMixin", "MovementMixin", "NormMixin",
           "PoolMixin", "RandomMixin", "ReduceMixin", "UserNamesMixin"]  # fmt: skip
