"""Control flow: If and Loop run their subgraphs eagerly, deciding branches and trip counts from realized values.

Subgraphs see every value of the graph around them. Because the condition is read back to Python, a model with
control flow realizes part of its graph while it runs: it works, but TinyJit captures only the path taken.
"""

from __future__ import annotations

from glassgrad.dtype import dtypes
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.onnx.runner import HOST
from glassgrad.tensor import Tensor


def _run_subgraph(ctx: OpContext, graph, bound: dict[str, Tensor | None]) -> list[Tensor | None]:
    """The subgraph's outputs, its inputs bound to `bound` on top of the enclosing scope's values."""
    values = ctx.runner.run_graph(graph, {**ctx.scope, **bound})
    return [values.get(o.name) for o in graph.output]


@onnx_op("If")
def if_(ctx: OpContext, cond: Tensor, *, then_branch, else_branch) -> tuple[Tensor | None, ...]:
    return tuple(_run_subgraph(ctx, then_branch if ctx.scalar(cond) else else_branch, {}))


@onnx_op("Loop")
def loop(ctx: OpContext, trip_count: Tensor | None, cond: Tensor | None, *initial: Tensor,
         body) -> tuple[Tensor, ...]:  # fmt: skip
    """Run `body` while the iteration count is below trip_count and its condition holds. The body maps
    (iteration, condition, carried values...) to (condition, carried values..., scan outputs...); each scan output
    is stacked along a new first axis."""
    limit = None if trip_count is None else int(ctx.scalar(trip_count))
    going = True if cond is None else bool(ctx.scalar(cond))
    names = [i.name for i in body.input]
    carried, scans, i = list(initial), [], 0
    while going and (limit is None or i < limit):
        bound = dict(zip(names[2:], carried))
        bound[names[0]] = Tensor(i, dtype=dtypes.int64, device=HOST)
        bound[names[1]] = Tensor(going, dtype=dtypes.bool, device=HOST)
        outs = _run_subgraph(ctx, body, bound)
        going, carried = bool(ctx.scalar(outs[0])), outs[1 : 1 + len(carried)]
        scans.append(outs[1 + len(carried) :])
        i += 1
    n_scans = len(body.output) - 1 - len(initial)
    if n_scans and not scans:
        raise ctx.error("a loop that runs no iteration has scan outputs of unknown shape", unsupported=True)
    stacked = [Tensor.stack(*[s[k].to(ctx.device) for s in scans]) for k in range(n_scans)]
    return (*carried, *stacked)
