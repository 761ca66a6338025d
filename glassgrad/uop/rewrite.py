"""Pattern matching on UOps: UPat describes a subgraph, PatternMatcher holds rules, graph_rewrite applies them."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glassgrad.dtype import DType
from glassgrad.uop.opcodes import GroupOp, Ops
from glassgrad.uop.operators import BinaryOperators

if TYPE_CHECKING:
    from glassgrad.uop.ops import UOp


class UPat(BinaryOperators):
    """A pattern over UOps. `src` as a tuple matches in order, as a list in any order; `name` binds the match."""

    def __init__(
        self,
        op: Ops | tuple[Ops, ...] | frozenset[Ops] | None = None,
        dtype: DType | tuple[DType, ...] | None = None,
        src: tuple[UPat, ...] | list[UPat] | UPat | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
    ):
        self.ops = None if op is None else (frozenset([op]) if isinstance(op, Ops) else frozenset(op))
        self.dtypes = None if dtype is None else (frozenset([dtype]) if isinstance(dtype, DType) else frozenset(dtype))
        self.src, self.arg, self.name, self.allow_any_len = src, arg, name, allow_any_len

    @staticmethod
    def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        """Matches any UOp and binds it to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        """Matches a constant and binds it to `name`."""
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: DType | tuple[DType, ...] | None, value: Any) -> UPat:
        """Matches a constant equal to `value`."""
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    # ---- operator sugar (uop/operators.py): UPat.var("x") + 0 builds the pattern of an ADD ----

    def _binary(self, op: Ops, other: UPat | int | float | bool, reverse: bool = False) -> UPat:
        other = other if isinstance(other, UPat) else UPat.const(None, other)
        pair = [other, self] if reverse else [self, other]
        return UPat(op, src=pair if op in GroupOp.Commutative else tuple(pair))

    def where(self, x, y):
        return UPat(Ops.WHERE, src=(self, x, y))

    def cast(self, dtype: DType | None = None, name: str | None = None):
        return UPat(Ops.CAST, dtype=dtype, src=(self,), name=name)

    def named(self, name: str) -> UPat:
        self.name = name
        return self

    # ---- matching ----

    def match(self, uop: UOp, bindings: dict[str, UOp]) -> list[dict[str, UOp]]:
        """All ways this pattern matches `uop`, each extending `bindings`."""
        if self.ops is not None and uop.op not in self.ops:
            return []
        if self.dtypes is not None and uop.dtype not in self.dtypes and uop.dtype.scalar not in self.dtypes:
            return []
        if self.arg is not None and not _same_arg(uop.arg, self.arg):
            return []
        if self.name is not None:
            if self.name in bindings and bindings[self.name] is not uop:
                return []
            bindings = {**bindings, self.name: uop}
        if self.src is None:
            return [bindings]
        if isinstance(self.src, UPat):  # one pattern for every source
            options = [[self.src] * len(uop.src)]
        elif isinstance(self.src, list):
            options = [list(p) for p in itertools.permutations(self.src)] if len(self.src) <= 3 else [self.src]
        else:
            options = [list(self.src)]
        results: list[dict[str, UOp]] = []
        for pats in options:
            if len(pats) != len(uop.src) and not (self.allow_any_len and len(pats) <= len(uop.src)):
                continue
            partial = [bindings]
            for pat, s in zip(pats, uop.src):
                partial = [b for prev in partial for b in pat.match(s, prev)]
                if not partial:
                    break
            results.extend(partial)
        return results

    def __repr__(self) -> str:
        return f"UPat({self.ops}, {self.dtypes}, src={self.src}, arg={self.arg}, name={self.name})"


def _same_arg(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return a == b


class PatternMatcher:
    """A table of (UPat, function) rules; `rewrite` returns the first rule's non-None result."""

    def __init__(self, rules: list[tuple[UPat, Callable[..., UOp | None]]]):
        self.rules = rules
        self.by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {}
        self.any_op: list[tuple[UPat, Callable, bool]] = []
        for pat, fn in rules:
            wants_ctx = "ctx" in inspect.signature(fn).parameters
            entry = (pat, fn, wants_ctx)
            if pat.ops is None:
                self.any_op.append(entry)
            for op in pat.ops or ():
                self.by_op.setdefault(op, []).append(entry)
        for op in self.by_op:  # rules for any op apply to every op, after the specific ones
            self.by_op[op].extend(self.any_op)

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """Apply the first rule that matches `uop` and returns something; None if none does."""
        for pat, fn, wants_ctx in self.by_op.get(uop.op, self.any_op):
            for bindings in pat.match(uop, {}):
                result = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
                if result is not None and result is not uop:
                    return result
        return None


# VIZ=1 sets this to glassgrad/viz's recorder, which notes each call and each rule that fires (uop/ can't import viz).
rewrite_tracer: Callable[[UOp, PatternMatcher, Any], UOp] | None = None


def graph_rewrite(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> UOp:
    """Rewrite a graph bottom-up: sources first, then each node until no rule applies (a fixed point)."""
    if rewrite_tracer is not None:
        return rewrite_tracer(root, matcher, ctx)
    return rewrite_to_fixed_point(root, matcher, ctx)


def rewrite_to_fixed_point(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> UOp:
    """graph_rewrite's work, untraced."""
    done: dict[UOp, UOp] = {}
    # stack entries: (node, stage, replacement). stage 0: visit sources; 1: rebuild and match; 2: adopt replacement
    stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
    while stack:
        node, stage, replacement = stack.pop()
        if node in done and stage != 2:
            continue
        if stage == 0:
            stack.append((node, 1, None))
            stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
        elif stage == 1:
            src = tuple(done[s] for s in node.src)
            rebuilt = node if src == node.src else node.replace(src=src)
            result = matcher.rewrite(rebuilt, ctx)
            if result is None:
                done[node] = rebuilt
                done.setdefault(rebuilt, rebuilt)
            elif result in done:
                done[node] = done[result]
            else:
                stack.append((node, 2, result))
                stack.append((result, 0, None))
        else:
            done[node] = done[replacement]
    return done[root]
