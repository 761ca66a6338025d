"""A kernel stores a value seen through a reshape in the value's own shape, through the reshaped store.

`(a.T @ b).reshape(-1)` written into a part of a buffer (a weight gradient in DistributedDataParallel's one buffer)
is STORE(out, VIEW(6144,), VIEW(REDUCE(64, 96, 1))): the kernel's axes would be those of the flat view, one output
axis of rows*columns, and the matmul's rows and columns (which the tensor-core matcher and the CPU's register blocks
need) would be divided back out of it in every load (2 GFLOP/s against 50-77 on the CPU). The same bytes are written
when the reduction is computed in its own shape and stored through the reshape of the store's view:

    STORE(out, VIEW(st), VIEW(x, reshape of x))  ->  STORE(out, VIEW(st reshaped to x's shape), x)

when the view of x only reshapes it (row-major, offset 0, no mask: no permute, pad or shrink) and the reshaped store
is still one view (the written region steps through the merged axes as through one: a strided slice that a merge
would cross keeps the kernel as it was).
"""

from __future__ import annotations

from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import PatternMatcher, UPat
from glassgrad.uop.view import ShapeTracker


def store_in_own_shape(store: UOp, st: UOp, seen: UOp, x: UOp) -> UOp | None:
    """STORE(out, VIEW(st), VIEW(x) that only reshapes x) as the store of x through st reshaped to x's shape."""
    if x.op is Ops.CONST or not seen.arg.contiguous or seen.arg.size != x.size or len(st.arg.views) != 1:
        return None  # a view that permutes, pads or shrinks x (the first rows of x are contiguous too) keeps its axes
    view = st.arg.views[0].reshape(x.shape)
    if view is None:
        return None
    return store.replace(src=(store.src[0], st.replace(arg=ShapeTracker((view,))), x))


_RESHAPED = UPat(Ops.VIEW, src=(UPat(name="x"),), name="seen")  # a computed value x seen through a view

store_shapes = PatternMatcher([
    # STORE(out, VIEW(st), VIEW(x)) -> STORE(out, VIEW(st reshaped), x)
    (UPat(Ops.STORE, src=(UPat(), UPat(Ops.VIEW, src=(), name="st"), _RESHAPED), name="store"), store_in_own_shape),
])  # fmt: skip
