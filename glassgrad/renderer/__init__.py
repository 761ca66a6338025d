"""Renderers turn a linear program into source text in a device's dialect."""

from __future__ import annotations

from glassgrad.dtype import DType
from glassgrad.uop.ops import UOp
from glassgrad.uop.rewrite import PatternMatcher


class Renderer:
    """Base of every renderer: what dtypes it can hold, its dialect fixes, and render()."""

    device: str = ""
    unsupported_dtypes: frozenset[DType] = frozenset()
    dialect: PatternMatcher | None = None  # rewrites applied to a kernel before it is linearized
    vector_lanes: tuple[int, ...] = ()  # lane counts it renders as vector types (none: every lane is scalar code)

    def supports(self, dtype: DType) -> bool:
        return dtype.scalar not in self.unsupported_dtypes

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        """Source text for the program; `outer_loop`, if given, is a loop whose iterations are independent."""
        raise NotImplementedError
