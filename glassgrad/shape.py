"""Shape arguments as users write them, f(2, 3), f((2, 3)) or f([2, 3]), checked once for every op that takes one."""

from __future__ import annotations

from typing import Any

from glassgrad.errors import ArgumentError


class ShapeError(ArgumentError):
    """A shape no tensor can have (a negative size, two sizes to infer): PyTorch raises RuntimeError, and glassgrad's
    shape errors are ValueErrors, so it is both."""


def unwrapped(args: Any) -> tuple[Any, ...]:
    """f(2, 3), f((2, 3)) and f([2, 3]) alike, as a tuple."""
    if isinstance(args, int):
        return (args,)
    return tuple(args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args)


def int_args(args: Any, op: str, rule: str = "sizes must be non-negative integers") -> tuple[int, ...]:
    """f(2, 3), f((2, 3)) and f([2, 3]) alike, as a tuple of ints; anything else (a bool, a float) is a ValueError
    that states `rule`."""
    out = unwrapped(args)
    for i, s in enumerate(out):
        if not isinstance(s, int) or isinstance(s, bool):
            raise ValueError(f"{op}: {rule}, got {out}: {type(s).__name__} {s!r} at index {i}")
    return out


def shape_arg(shape: Any, op: str, minus_one: str | None = None, current: tuple[int, ...] | None = None
              ) -> tuple[int, ...]:  # fmt: skip
    """The sizes of a shape argument, each non-negative, except -1 where `minus_one` allows it: "infer" (reshape:
    one size inferred from the others) or "keep" (expand: any size kept as it is). As in tinygrad, None keeps a
    size too: expand's -1, or reshape's size of the `current` shape at that position."""
    out = int_args(_none_kept(unwrapped(shape), op, minus_one, current), op)
    for i, s in enumerate(out):
        if s < -1 or (s == -1 and minus_one is None):
            raise ShapeError(f"{op}: sizes must be non-negative integers, got {out}: size {s} at index {i}")
    if minus_one == "infer" and out.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {out} (its size is inferred from the others)")
    return out


def _none_kept(sizes: tuple[Any, ...], op: str, minus_one: str | None, current: tuple[int, ...] | None) -> tuple:
    """sizes with each None as the size it keeps: -1 where -1 keeps one, else the current shape's at that index."""
    if None not in sizes or (minus_one != "keep" and current is None):  # no None, or no size for one to keep
        return sizes
    if minus_one == "keep":
        return tuple(-1 if s is None else s for s in sizes)
    if any(s is None and i >= len(current) for i, s in enumerate(sizes)):
        raise ValueError(f"{op}: None keeps a size of the tensor's shape {current}, but {sizes} puts one where it "
                         "has none")  # fmt: skip
    return tuple(current[i] if s is None else s for i, s in enumerate(sizes))


def distinct_dims(dims: list[int], op: str) -> list[int]:
    """dims (wrapped to 0..ndim-1 already), each named once: a repeat is an ArgumentError, as PyTorch's."""
    if len(set(dims)) != len(dims):
        repeated = next(d for d in dims if dims.count(d) > 1)
        raise ArgumentError(f"{op}: dimension {repeated} appears more than once in {tuple(dims)}")
    return dims


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], op: str, operands: str = "", trailing: int = 0
                    ) -> tuple[int, ...]:  # fmt: skip
    """NumPy broadcasting of two shapes: aligned from the right, sizes must match or be 1. The error names
    `operands` (by default "shapes a and b") and counts dimensions from the end of shapes that have `trailing` more
    dimensions after these (matmul's batch shapes have 2)."""
    n = max(len(a), len(b))
    a2, b2 = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    for i, (x, y) in enumerate(zip(a2, b2)):
        if x != y and x != 1 and y != 1:
            raise ArgumentError(f"{op}: {operands or f'shapes {a} and {b}'} cannot broadcast: dimension "
                                f"{i - n - trailing} has sizes {x} and {y}; sizes must match or be 1 (reshape or "
                                "unsqueeze one side to line them up)")  # fmt: skip
    return tuple(y if x == 1 else x for x, y in zip(a2, b2))
