"""An ATTENTION kernel (mixin/fused_attention.py): read off its AST what it computes, and have the renderer write it.

Its AST is SINK(STORE(out, VIEW, ATTENTION(LOAD(q), LOAD(k), LOAD(v)[, LOAD(mask)]))), each input a buffer seen through
one strided view (schedule/kernelize.py makes sure of it) of the shapes (*batch, L, E), (*batch, S, E), (*batch, S,
Ev), (*batch, L, S). No loops are lowered and no optimization applies: the renderer writes the kernel whole.
"""

from __future__ import annotations

from glassgrad.renderer import Renderer
from glassgrad.renderer.attention import AttentionSpec, Operand
from glassgrad.uop.ops import Ops, UOp


def is_attention(ast: UOp) -> bool:
    """Whether a kernel's AST is a fused attention's."""
    return len(ast.src) == 1 and ast.src[0].op is Ops.STORE and ast.src[0].src[2].op is Ops.ATTENTION


def _operand(load: UOp) -> Operand:
    """A LOAD's buffer as it lies in memory; one strided view, no mask (what kernelize gives an ATTENTION's input)."""
    if load.op is not Ops.LOAD or len(load.src[1].arg.views) != 1 or load.src[1].arg.views[0].mask is not None:
        raise ValueError(f"an ATTENTION kernel reads buffers through one strided view each, got {load}")
    view = load.src[1].arg.views[0]
    return Operand(load.src[0].arg, load.dtype, view.offset, view.strides[:-2], view.strides[-2], view.strides[-1])


def attention_spec(ast: UOp) -> AttentionSpec:
    """What the kernel computes, for the renderer."""
    node = ast.src[0].src[2]
    q, k, v, *mask = (_operand(s) for s in node.src)
    (*batch, length, head), source, value = node.src[0].shape, node.src[1].shape[-2], node.src[2].shape[-1]
    scale, causal = node.arg
    return AttentionSpec(tuple(batch), length, source, head, value, scale, causal, q, k, v, mask[0] if mask else None)


def attention_name(spec: AttentionSpec) -> str:
    """A_ then the batch entries, L, S, E and Ev."""
    return f"A_{spec.entries}_{spec.length}_{spec.source_length}_{spec.head_size}_{spec.value_size}"


def attention_counts(spec: AttentionSpec) -> tuple[int, int]:
    """Ops (two matrix products, and an exp a score) and bytes (each input read once, the outputs written once)."""
    scores = spec.rows * spec.source_length
    ops = 2 * scores * (spec.head_size + spec.value_size) + scores
    length, source, head, value = spec.length, spec.source_length, spec.head_size, spec.value_size
    inputs = [(spec.q, length * head), (spec.k, source * head), (spec.v, source * value), (spec.mask, length * source)]
    mem = sum(x.dtype.itemsize * n * spec.entries for x, n in inputs if x is not None)
    return ops, mem + 4 * spec.rows * (spec.value_size + 1)


def attention_program(ast: UOp, renderer: Renderer) -> tuple[str, str, tuple[int, ...], tuple[int, ...] | None, int,
                                                              int]:  # fmt: skip
    """The kernel's name, source, global and local size, ops and bytes."""
    spec = attention_spec(ast)
    name = attention_name(spec)
    src, global_size, local_size = renderer.render_attention(name, spec)
    return (name, src, global_size, local_size, *attention_counts(spec))
