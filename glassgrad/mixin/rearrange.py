"""Tensor.rearrange: einops-style patterns ("b c (h w) -> b (c h) w", h=2) as one reshape, permute and reshape.

A pattern names the input's dims on the left and the output's on the right. A parenthesized group is one dim made
of several axes (split on the left, merged on the right); "..." stands for the dims no name covers; "1" (or "()")
is an axis of size 1 that appears or disappears. Every other axis name appears once on each side.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from glassgrad.helpers import prod
from glassgrad.shape import ShapeError

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

TOKEN = re.compile(r"\.\.\.|[()]|[A-Za-z_][A-Za-z0-9_]*|\d+|\S")
ELLIPSIS = "..."
MERGED_ELLIPSIS = "(...)"  # "..." inside parentheses: its dims merged into one
UNIT = "1"  # an anonymous axis of size 1

Group = list[str]  # the axes of one dim, outermost first


class RearrangeMixin:
    """rearrange."""

    def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
        """Split, merge, reorder, add or drop dims by an einops pattern: x.rearrange("b (h w) c -> b h w c", h=2)."""
        if formula.count("->") != 1:
            raise ShapeError(f"rearrange: the pattern {formula!r} needs exactly one '->' between input and output")
        left, right = (_parse(side, formula) for side in formula.split("->"))
        left, right = _expand_ellipsis(left, right, self.ndim, formula)
        known = _axis_sizes(left, self.shape, sizes, formula)
        names = [axis for group in left for axis in group if axis != UNIT]
        wanted = [axis for group in right for axis in group if axis != UNIT]
        if sorted(names) != sorted(wanted):
            raise ShapeError(f"rearrange: in {formula!r} each axis must appear once on each side; "
                             f"only on the left: {sorted(set(names) - set(wanted))}, "
                             f"only on the right: {sorted(set(wanted) - set(names))}")  # fmt: skip
        if unknown := set(sizes) - set(names):
            raise ShapeError(f"rearrange: sizes given for axes {sorted(unknown)} that {formula!r} does not name")
        split = self.reshape(tuple(known[axis] for axis in names))
        moved = split.permute(tuple(names.index(axis) for axis in wanted))
        return moved.reshape(tuple(prod(known.get(axis, 1) for axis in group) for group in right))


def _parse(side: str, formula: str) -> list[Group]:
    """One side of a pattern as its groups (one per dim); a bare name or "..." is a group of one."""
    groups: list[Group] = []
    current: Group | None = None
    for token in TOKEN.findall(side):
        if token == "(":
            if current is not None:
                raise ShapeError(f"rearrange: nested parentheses in {formula!r}")
            current = []
        elif token == ")":
            if current is None:
                raise ShapeError(f"rearrange: a ')' without its '(' in {formula!r}")
            groups.append(current)
            current = None
        elif token == ELLIPSIS or token == UNIT or token[0].isalpha() or token[0] == "_":
            if current is None:
                groups.append([token])
            else:
                current.append(MERGED_ELLIPSIS if token == ELLIPSIS else token)
        else:
            raise ShapeError(f"rearrange: {token!r} in {formula!r} is not an axis name, '...', '1' or a parenthesis "
                             "(only axes of size 1 may be anonymous)")  # fmt: skip
    if current is not None:
        raise ShapeError(f"rearrange: a '(' is not closed in {formula!r}")
    named = [axis for group in groups for axis in group if axis != UNIT]
    if len(set(named)) != len(named):
        raise ShapeError(f"rearrange: an axis appears twice on one side of {formula!r}")
    return groups


def _expand_ellipsis(left: list[Group], right: list[Group], ndim: int,
                     formula: str) -> tuple[list[Group], list[Group]]:  # fmt: skip
    """Both sides with "..." replaced by the names of the dims it covers on the left: one group each where it
    stands alone, one group of them all where it is in parentheses (on the right)."""
    if any(MERGED_ELLIPSIS in group for group in left):
        raise ShapeError(f"rearrange: '...' cannot be in parentheses on the left side of {formula!r}")
    count = left.count([ELLIPSIS])
    if count != sum(axis in (ELLIPSIS, MERGED_ELLIPSIS) for group in right for axis in group) or count > 1:
        raise ShapeError(f"rearrange: '...' must appear once on both sides of {formula!r}, or on neither")
    covered = ndim - (len(left) - count)
    if covered < 0 or (not count and covered):
        raise ShapeError(f"rearrange: the left side of {formula!r} names {len(left) - count} dims but the tensor has "
                         f"{ndim}")  # fmt: skip
    if not count:
        return left, right
    dims = [f"...{i}" for i in range(covered)]

    def expanded(side: list[Group]) -> list[Group]:
        out: list[Group] = []
        for group in side:
            if group == [ELLIPSIS]:
                out += [[d] for d in dims]
            else:
                out.append([d for axis in group for d in (dims if axis == MERGED_ELLIPSIS else [axis])])
        return out

    return expanded(left), expanded(right)


def _axis_sizes(left: list[Group], shape: tuple[int, ...], sizes: dict[str, int], formula: str) -> dict[str, int]:
    """The size of every named axis: a plain name's is its dim's; in a group, given, or the dim's size divided by
    the others'."""
    known: dict[str, int] = {}
    for group, dim in zip(left, shape, strict=True):
        named = [axis for axis in group if axis != UNIT]
        if len(group) == 1 and named:
            known[named[0]] = dim
            if sizes.get(named[0], dim) != dim:
                raise ShapeError(f"rearrange: {named[0]}={sizes[named[0]]} but its dim has size {dim} in {formula!r}")
            continue
        unknown = [axis for axis in named if axis not in sizes]
        if len(unknown) > 1:
            raise ShapeError(f"rearrange: cannot split a dim of size {dim} into {group} in {formula!r}: give the "
                             f"sizes of all but one of {unknown} (e.g. {unknown[0]}=...)")  # fmt: skip
        given = prod(sizes[axis] for axis in named if axis in sizes)
        for axis in named:
            known[axis] = sizes.get(axis, dim // given if given else 0)
        if prod(known[axis] for axis in named) != dim:
            split = {axis: known[axis] for axis in named}
            raise ShapeError(f"rearrange: a dim of size {dim} cannot be split as {split} in {formula!r}")
    return known
