"""Codegen's entry points say what they got where they need a kernel AST: a COPY item's AST (from `.to()`, or a
tensor made from a list) failed with an IndexError deep in the lowerer."""

import pytest

from glassgrad import Device, Tensor
from glassgrad.codegen import choose_opts, full_rewrite_to_sink, get_program
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.uop.ops import Ops

ENTRY_POINTS = {
    "full_rewrite_to_sink": lambda ast: full_rewrite_to_sink(ast),
    "get_program": lambda ast: get_program(ast, Device["CPU"].renderer),
    "choose_opts": lambda ast: choose_opts(ast, Device["CPU"].renderer),
    "lower_kernel": lambda ast: lower_kernel(ast),
}
COPIES = {
    "to_another_device": lambda: Tensor.ones(3).contiguous().realize().to("PYTHON"),
    "made_from_a_list": lambda: Tensor([1.0, 2.0, 3.0]),
}


@pytest.mark.parametrize("copy", list(COPIES))
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_copy_ast_is_named(entry, copy):
    (item,) = [i for i in COPIES[copy]().schedule() if i.ast.op is Ops.COPY]
    with pytest.raises(ValueError, match=rf"^{entry}: expected a kernel AST, SINK\(STORE.*; got COPY \(a COPY between"):
        ENTRY_POINTS[entry](item.ast)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_store_without_its_sink_and_a_non_uop_are_named(entry):
    ast = (Tensor.ones(4).contiguous() + 1).schedule()[-1].ast
    with pytest.raises(ValueError, match=rf"^{entry}: .*got STORE"):
        ENTRY_POINTS[entry](ast.src[0])
    with pytest.raises(TypeError, match=rf"^{entry}: .*got a str"):
        ENTRY_POINTS[entry]("E_4")


def test_a_kernel_ast_still_compiles():
    ast = (Tensor.ones(4).contiguous() + 1).schedule()[-1].ast
    spec = get_program(ast, Device["CPU"].renderer)
    assert spec.name == "E_4" and "data0" in spec.src
    assert full_rewrite_to_sink(ast).op is Ops.SINK
