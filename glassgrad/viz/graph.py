"""UOp graphs drawn as SVG: glassgrad writes the graph in Graphviz's DOT language and `dot` lays it out."""

from __future__ import annotations

import shutil
import subprocess
import textwrap

from glassgrad.dtype import dtypes
from glassgrad.uop.ops import GroupOp, Ops, UOp

DOT_MISSING = "Graphviz's `dot` was not found: install graphviz (apt-get install graphviz, or brew install graphviz)"
MAX_NODES = 1500  # dot takes many seconds beyond this; such graphs are shown as text instead
ARG_WIDTH, ARG_LINES = 40, 4

# Fill colors by what a node does: memory, loops, math, views, constants, structure.
_FILLS = [
    ({Ops.BUFFER, Ops.DEFINE_GLOBAL, Ops.DEFINE_ACC, Ops.UNIQUE, Ops.DEVICE}, "#b0bdff"),
    ({Ops.LOAD, Ops.STORE, Ops.INDEX, Ops.COPY, Ops.ASSIGN, Ops.CONTIGUOUS}, "#ffc0c0"),
    ({Ops.RANGE, Ops.ENDRANGE, Ops.REDUCE, Ops.REDUCE_AXIS}, "#e0c0ff"),
    (GroupOp.Elementwise, "#ffffc0"),
    (GroupOp.Movement | {Ops.VIEW}, "#c8f0c8"),
    ({Ops.CONST, Ops.ARANGE}, "#e8e8e8"),
    ({Ops.SINK, Ops.KERNEL}, "#ffd8a0"),
]
# Outlines: what a step took away, what it put in, and the nodes above them, rebuilt only because a source changed.
MARKS = {"removed": "#d00000", "added": "#008a00", "rebuilt": "#e08a00"}


class GraphvizMissing(RuntimeError):
    """Raised when `dot` is not on PATH."""


def _fill(node: UOp) -> str:
    return next((fill for ops, fill in _FILLS if node.op in ops), "#ffffff")


def _label(node: UOp) -> str:
    lines = [node.op.name]
    if node.dtype != dtypes.void:
        lines.append(repr(node.dtype).removeprefix("dtypes."))
    if node.arg is not None:
        lines += textwrap.wrap(repr(node.arg), ARG_WIDTH, max_lines=ARG_LINES, placeholder=" …") or [""]
    return "\n".join(lines)


def _quote(text: str) -> str:
    """A DOT string literal: backslashes and quotes escaped, newlines as centered line breaks."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _outline(mark: str | None) -> str:
    if mark is None:
        return ""
    dashed = ', style="rounded,filled,dashed"' if mark == "rebuilt" else ""
    return f", color={_quote(MARKS[mark])}, penwidth=3{dashed}"


def dot_source(root: UOp, marks: dict[UOp, str] | None = None) -> str:
    """The graph under `root` in the DOT language: sources above their users, `marks` outlined by kind."""
    marks = marks or {}
    nodes = root.toposort()
    ids = {node: f"n{i}" for i, node in enumerate(nodes)}
    lines = [
        "digraph uops {",
        '  node [shape=box, style="rounded,filled", fontname="monospace", fontsize=10, margin="0.08,0.03"];',
        '  edge [arrowsize=0.6, color="#606060"];',
    ]
    for node in nodes:
        outline = _outline(marks.get(node))
        lines.append(f"  {ids[node]} [label={_quote(_label(node))}, fillcolor={_quote(_fill(node))}{outline}];")
        lines += [f"  {ids[src]} -> {ids[node]};" for src in node.src]
    lines.append("}")
    return "\n".join(lines)


def render_svg(root: UOp, marks: dict[UOp, str] | None = None) -> str:
    """The graph as an SVG element laid out by `dot`; raises GraphvizMissing (saying what to install) without it."""
    if (dot := shutil.which("dot")) is None:
        raise GraphvizMissing(DOT_MISSING)
    if (count := len(root.toposort())) > MAX_NODES:
        raise ValueError(f"this graph has {count} nodes, more than the {MAX_NODES} drawn; see its text below")
    out = subprocess.run([dot, "-Tsvg"], input=dot_source(root, marks), capture_output=True, text=True, check=True)
    return out.stdout[out.stdout.index("<svg") :]  # drop the XML prolog: the page inlines the element
