"""What VIZ=1 records: every graph_rewrite call with each rule that fired, and every kernel compiled."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from glassgrad.engine import realize
from glassgrad.uop import rewrite
from glassgrad.uop.ops import UOp
from glassgrad.uop.rewrite import PatternMatcher


@dataclass
class RuleFired:
    """One step of a rewrite: `rule` matched `before` (its sources already rewritten) and returned `after`."""

    rule: Callable[..., UOp | None]
    before: UOp
    after: UOp


@dataclass
class RewriteRecord:
    """One graph_rewrite call: where it was called from, its input, the steps it took and its output."""

    caller: str
    input: UOp
    kernel: int | None  # the kernel being compiled when it ran, if any
    steps: list[RuleFired] = field(default_factory=list)
    output: UOp | None = None

    def graphs(self) -> list[UOp]:
        """The whole graph after each step: the input, then each step's replacement substituted in turn."""
        states = [self.input]
        for step in self.steps:
            states.append(states[-1].substitute({step.before: step.after}))
        return states


@dataclass
class KernelRecord:
    """A kernel compiled during the run: its device, AST, and the program made from it (a ProgramSpec)."""

    device: str
    ast: UOp
    spec: Any = None
    rewrites: list[int] = field(default_factory=list)  # positions in Recorder.rewrites


@dataclass
class Recorder:
    """Everything recorded so far, in the order it happened."""

    rewrites: list[RewriteRecord] = field(default_factory=list)
    kernels: list[KernelRecord] = field(default_factory=list)
    compiling: int | None = None  # the kernel whose program is being made now


class _NotingRules:
    """A matcher's rules, each wrapped to remember that it fired: the last one that returned a node is the winner."""

    def __init__(self, matcher: PatternMatcher):
        self.last_rule: Callable[..., UOp | None] | None = None
        self.matcher = PatternMatcher([(pat, self._noting(fn)) for pat, fn in matcher.rules])

    def _noting(self, fn: Callable[..., UOp | None]) -> Callable[..., UOp | None]:
        @functools.wraps(fn)  # keeps the signature, so a rule that takes `ctx` still gets it
        def rule(**bindings: Any) -> UOp | None:
            result = fn(**bindings)
            if result is not None:
                self.last_rule = fn
            return result

        return rule


class _RecordingMatcher:
    """Stands in for a PatternMatcher during one graph_rewrite call and adds each rewrite it makes to `record`."""

    def __init__(self, rules: _NotingRules, record: RewriteRecord):
        self.rules, self.record = rules, record

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        result = self.rules.matcher.rewrite(uop, ctx)
        if result is not None:
            self.record.steps.append(RuleFired(self.rules.last_rule, uop, result))
        return result


recorder: Recorder | None = None
_noting_rules: weakref.WeakKeyDictionary[PatternMatcher, _NotingRules] = weakref.WeakKeyDictionary()
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the glassgrad package


def _where(code: CodeType, line: int) -> str:
    """A place in the source: `uop/symbolic.py:214` inside glassgrad, the full path elsewhere."""
    path = os.path.abspath(code.co_filename)
    return f"{os.path.relpath(path, _HERE) if path.startswith(_HERE + os.sep) else code.co_filename}:{line}"


def _caller() -> str:
    """The function that called graph_rewrite (skipping helpers such as `simplify`), as `name (file:line)`."""
    frame = sys._getframe(3)  # past this function, the tracer and graph_rewrite
    while frame.f_back is not None and frame.f_code.co_name == "simplify":
        frame = frame.f_back
    return f"{frame.f_code.co_name} ({_where(frame.f_code, frame.f_lineno)})"


def _traced_graph_rewrite(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> UOp:
    assert recorder is not None
    record = RewriteRecord(_caller(), root, recorder.compiling)
    recorder.rewrites.append(record)
    if record.kernel is not None:
        recorder.kernels[record.kernel].rewrites.append(len(recorder.rewrites) - 1)
    if (rules := _noting_rules.get(matcher)) is None:
        rules = _noting_rules[matcher] = _NotingRules(matcher)
    record.output = rewrite.rewrite_to_fixed_point(root, _RecordingMatcher(rules, record), ctx)
    return record.output


def start() -> Recorder:
    """Record every graph_rewrite call and kernel compiled from now on (VIZ=1 calls this when glassgrad is imported)."""
    global recorder
    if recorder is None:
        recorder = Recorder()
        rewrite.rewrite_tracer, realize.compile_tracer = _traced_graph_rewrite, _traced_compile
    return recorder


def stop() -> None:
    """Stop recording and forget what was recorded."""
    global recorder
    recorder, rewrite.rewrite_tracer, realize.compile_tracer = None, None, None


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record the rewrites and kernels of a block of code: `with recording() as rec: ...`."""
    rec = start()
    try:
        yield rec
    finally:
        stop()


def _traced_compile(device: str, ast: UOp, make: Callable[[str, UOp], Any]) -> Any:
    """A kernel's program made by `make` (engine/realize.py's), its rewrites noted as the kernel's own."""
    assert recorder is not None
    outer, kernel = recorder.compiling, KernelRecord(device, ast)
    recorder.kernels.append(kernel)
    recorder.compiling = len(recorder.kernels) - 1
    try:
        kernel.spec = make(device, ast)
    finally:
        recorder.compiling = outer
    return kernel.spec


@functools.cache
def rule_source(rule: Callable[..., Any]) -> tuple[str, str]:
    """A rule's source line (the row of its rule table, for a lambda) and where it is: `uop/symbolic.py:123`."""
    fn = inspect.unwrap(rule)
    try:
        lines, _ = inspect.getsourcelines(fn)
        text = lines[0].strip() if fn.__name__ == "<lambda>" else _named_rule(fn)
    except (OSError, TypeError):
        text = fn.__name__
    return text, _where(fn.__code__, fn.__code__.co_firstlineno)


def _named_rule(fn: Callable[..., Any]) -> str:
    """A rule written as a function: its name and the first line of its docstring."""
    doc = (inspect.getdoc(fn) or "").split("\n")[0]
    return f"{fn.__name__}: {doc}" if doc else fn.__name__
