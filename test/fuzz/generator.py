"""`generate(seed)`: one random program, the same for the same seed and options."""

from __future__ import annotations

import random

from . import ops_math, ops_shape
from .program import Gen, Program, run_step
from .reference import is_float

OPS: dict[str, tuple[str, object]] = ops_math.builders() | ops_shape.builders()
FAMILIES = sorted({family for family, _ in OPS.values()})
# how often each family is tried, relative to one another
FAMILY_WEIGHT = {"movement": 4, "index": 2.5, "join": 1, "unary": 2, "activation": 1, "binary": 3, "compare": 1.5,
                 "where": 1, "cast": 1.5, "reduce": 3, "matmul": 0.7}  # fmt: skip


def select(ops: list[str] | None) -> list[str]:
    """The op names a run uses: all, or those named (an op or a family name each)."""
    if not ops:
        return list(OPS)
    unknown = [o for o in ops if o not in OPS and o not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown ops or families {unknown}; ops: {sorted(OPS)}; families: {FAMILIES}")
    return [n for n, (family, _) in OPS.items() if n in ops or family in ops]


def generate(seed: int, device: str | None = None, ops: list[str] | None = None,
             exclude: frozenset[str] = frozenset()) -> Program:  # fmt: skip
    """A program of 1 to 3 inputs and up to 8 steps from `ops`, leaving out the ops and features in `exclude`."""
    names = [n for n in select(ops) if n not in exclude]
    weights = [FAMILY_WEIGHT[OPS[n][0]] / sum(1 for m in names if OPS[m][0] == OPS[n][0]) for n in names]
    pick_device = random.Random(seed ^ 0x5EED)
    device = device or ("PYTHON" if pick_device.random() < 0.15 else "CPU")
    g = Gen(seed, device, exclude)
    for _ in range(g.rng.choice((1, 1, 2, 3))):
        g.add_input(g.shape(), g.dtype())
    want = g.rng.randint(1, 8 if device == "CPU" else 4)
    tries = 0
    while len(g.program.steps) < want and tries < want * 12 and not g.program.expect_error:
        tries += 1
        op = g.rng.choices(names, weights)[0]
        _, build = OPS[op]
        spec = build(g, op)
        if spec is not None:
            run_step(g, op, spec)
    prog = g.program
    prog.finite_grads_only = "nonfinite-grad" in exclude
    if prog.expect_error:
        prog.outputs = [prog.steps[-1].out]
    else:
        used = {a for s in prog.steps for a in s.args}
        prog.outputs = [s.out for s in prog.steps if s.out not in used] or list(prog.values)[-1:]
    return prog


def has_grads(prog: Program) -> bool:
    return any(is_float(prog.values[o].dtype) for o in prog.outputs) and any(i.grad for i in prog.inputs)
