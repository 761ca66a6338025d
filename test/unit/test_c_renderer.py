"""renderer/cstyle.py: the C writer renders the ops it knows and raises on one it has no handler for."""

import pytest

from glassgrad import Tensor
from glassgrad.codegen import get_program
from glassgrad.codegen.opt import Opt
from glassgrad.renderer.cstyle import CRenderer
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.uop import Ops

pytestmark = pytest.mark.usefixtures("on_the_cpu")


def gpu_sum_program():
    """A whole-tensor sum lowered for a GPU with its reduction shared by a GROUP of threads: the program holds a
    thread index (SPECIAL) and a shared-memory combine (REDUCE), which only the CUDA writer has handlers for."""
    (item,) = Tensor.ones(1024).contiguous().realize().sum().schedule()
    return get_program(item.ast, CUDARenderer(), (Opt("GROUP", 0, 32),)).program


def test_a_gpu_program_renders_for_the_gpu():
    program = list(gpu_sum_program())
    assert {Ops.SPECIAL, Ops.REDUCE} <= {u.op for u in program}
    assert "threadIdx.x" in CUDARenderer().render("r_1024", program)


def test_the_c_renderer_raises_on_an_op_it_has_no_handler_for():
    """Not handed to the math writer as arithmetic (a SPECIAL there raised IndexError on its missing operands)."""
    with pytest.raises(NotImplementedError, match=r"CRenderer has no handler for Ops\.SPECIAL \(kernel r_1024\)"):
        CRenderer().render("r_1024", list(gpu_sum_program()))
