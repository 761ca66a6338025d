"""codegen/gather.py: a sum over a one-hot mask (`sum_r where(r == e, v(r), 0)`, how indexing is written with
primitive ops) becomes one guarded load of v(e); also when the sum widens small ints first (a cast around the select),
as a uint8 label lookup does. Checked through the kernels the CPU compiles (no loop over the table is left) and
against NumPy."""

import numpy as np
import pytest

from glassgrad import Context, Device, Tensor
from glassgrad.codegen import get_program

pytestmark = pytest.mark.usefixtures("on_the_cpu")

TABLE = 997  # a prime: no loop of any other size in these kernels has it


def kernel_sources(out: Tensor) -> list[str]:
    with Context(NOOPT=1):
        items = out.schedule()
    return [get_program(i.ast, Device["CPU"].renderer).src for i in items if i.ast.op.name == "SINK"]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.int8], ids=lambda d: d.__name__)
def test_a_lookup_by_index_reads_one_element_instead_of_the_whole_table(dtype):
    table = (np.arange(TABLE) * 7 % 251).astype(dtype)
    picks = np.array([3, TABLE - 1, 0, 57, -1, -TABLE], dtype=np.int32)  # negative positions count from the end
    out = Tensor(table).realize()[Tensor(picks).realize()]
    sources = kernel_sources(out)
    assert sources and not any(f"< {TABLE};" in src for src in sources), "a loop over the whole table is left"
    np.testing.assert_array_equal(out.numpy(), table[picks])


def test_a_widened_sum_that_is_no_lookup_is_left_alone():
    """sum_r cast(where(r < e, v(r), 0)): a prefix sum of small ints, not a one-hot pick; it keeps its loop."""
    table = np.arange(TABLE).astype(np.uint8)
    t = Tensor(table).realize()
    r = Tensor.arange(TABLE)
    out = (r < 500).where(t, 0).sum()  # sums uint8 as uint32
    assert any(f"< {TABLE};" in src for src in kernel_sources(out))
    assert out.item() == int(table[:500].astype(np.uint32).sum())
