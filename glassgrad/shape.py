"""Shape arguments as users write them, f(2, 3), f((2, 3)) or f([2, 3]), checked once for every op that takes one."""

from __future__ import annotations

from typing import Any


class ShapeError(ValueError, RuntimeError):
    """A shape no tensor can have (a negative size, two sizes to infer): PyTorch raises RuntimeError, and glassgrad's
    shape errors are ValueErrors, so it is both."""


def int_args(args: Any, op: str, rule: str = "sizes must be non-negative integers") -> tuple[int, ...]:
    """f(2, 3), f((2, 3)) and f([2, 3]) alike, as a tuple of ints; anything else (a bool, a float) is a ValueError
    that states `rule`."""
    if isinstance(args, int):
        args = (args,)
    elif len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    out = tuple(args)
    for i, s in enumerate(out):
        if not isinstance(s, int) or isinstance(s, bool):
            raise ValueError(f"{op}: {rule}, got {out}: {type(s).__name__} {s!r} at index {i}")
    return out


def shape_arg(shape: Any, op: str, minus_one: str | None = None) -> tuple[int, ...]:
    """The sizes of a shape argument, each non-negative, except -1 where `minus_one` allows it: "infer" (reshape:
    one size inferred from the others) or "keep" (expand: any size kept as it is)."""
    out = int_args(shape, op)
    for i, s in enumerate(out):
        if s < -1 or (s == -1 and minus_one is None):
            raise ShapeError(f"{op}: sizes must be non-negative integers, got {out}: size {s} at index {i}")
    if minus_one == "infer" and out.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {out} (its size is inferred from the others)")
    return out


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], op: str, operands: str = "", trailing: int = 0
                    ) -> tuple[int, ...]:  # fmt: skip
    """NumPy broadcasting of two shapes: aligned from the right, sizes must match or be 1. The error names
    `operands` (by default "shapes a and b") and counts dimensions from the end of shapes that have `trailing` more
    dimensions after these (matmul's batch shapes have 2)."""
    n = max(len(a), len(b))
    a2, b2 = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    for i, (x, y) in enumerate(zip(a2, b2)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{op}: {operands or f'shapes {a} and {b}'} cannot broadcast: dimension "
                             f"{i - n - trailing} has sizes {x} and {y}; sizes must match or be 1 (reshape or "
                             "unsqueeze one side to line them up)")  # fmt: skip
    return tuple(y if x == 1 else x for x, y in zip(a2, b2))
