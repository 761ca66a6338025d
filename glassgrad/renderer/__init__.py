"""Renderers turn a linear program into source text in a device's dialect."""

from __future__ import annotations

from glassgrad.dtype import ALL_DTYPES, DType, dtypes
from glassgrad.uop.ops import UOp
from glassgrad.uop.rewrite import PatternMatcher


class Renderer:
    """Base of every renderer: what dtypes it can hold, its dialect fixes, and render()."""

    device: str = ""
    tile_configs: tuple = ()  # tiled matrix products its render_matmul writes (none: contractions take plain loops)
    unsupported_dtypes: frozenset[DType] = frozenset()
    dialect: PatternMatcher | None = None  # rewrites applied to a kernel before it is linearized
    vector_lanes: tuple[int, ...] = ()  # lane counts it renders as vector types (none: every lane is scalar code)
    runs_kernels: bool = True  # False: the device holds bytes only (DISK: a file); the scheduler reads its buffers as
    # they lie and copies them out (schedule/kernelize.py disk_span)
    has_local: bool = False  # it renders blocks of threads that share memory (a GPU): the LOCAL and GROUP actions
    chain_sums: bool = False  # a float sum's unrolled terms go into its accumulator one by one (codegen/linearize.py)
    atomic_adds: bool = False  # a STORE that adds into memory (a scatter's) is atomic: threads may add into one place
    cache_bytes: int = 0  # bytes of a core's cache a kernel's operands may keep: the heuristics' CHUNK size (0: none)
    fused_attention: bool = False  # scaled_dot_product_attention asks it for an ATTENTION kernel, which it writes
    # whole (render_attention; mixin/fused_attention.py)
    # layouts the scheduler gives operands where this renderer's kernels pay for them (it asks, naming no device):
    packs_panels: bool = False  # its matmuls are register-blocked over B's columns: a large B is packed (pack.py)
    buffers_windows: bool = False  # a mask test per load keeps its loops from vector code: a convolution's padded
    # input and weight get buffers of their own (schedule/conv.py)

    def prefers_channels_last(self, dtype: DType) -> bool:
        """Whether a convolution whose operands are of this dtype reads them channels-last (schedule/channels_last.py):
        its kernels copy 16 bytes of channels at a time where they lie side by side."""
        return False

    def supports(self, dtype: DType) -> bool:
        return dtype.scalar not in self.unsupported_dtypes

    def supported_dtypes(self) -> set[DType]:
        """The dtypes its device holds and computes with (tinygrad's `Device[...].renderer.supported_dtypes()`)."""
        return {d for d in ALL_DTYPES + dtypes.fp8s if self.supports(d)}

    def launch_size(self, program: list[UOp], outer_loop: UOp | None = None) -> tuple[tuple[int, ...] | None, ...]:
        """The global size (by default the outer loop's length; None without one) and the local size (threads that
        work together on one global index, a GPU's block; None: one thread each), in the device's own terms."""
        return ((outer_loop.src[0].arg,) if outer_loop is not None else None), None

    def fuses_attention(self, dtype: DType, head_size: int, value_size: int) -> bool:
        """Whether scaled_dot_product_attention asks for an ATTENTION kernel of q, k, v of `dtype` and these head
        sizes (of q and k, of v): by default where `fused_attention` says so."""
        return self.fused_attention

    def render_attention(self, name: str, spec) -> tuple[str, tuple[int, ...], tuple[int, ...] | None]:
        """A fused attention kernel (renderer/attention.py's AttentionSpec): its source, global and local size."""
        raise NotImplementedError(f"{type(self).__name__} writes no fused attention kernel")

    def render(self, name: str, program: list[UOp], outer_loop: UOp | None = None) -> str:
        """Source text for the program; `outer_loop`, if given, is a loop whose iterations are independent."""
        raise NotImplementedError
