"""codegen/gather.py: a sum over a one-hot mask (`sum_r where(r == e, v(r), 0)`, how indexing is written with
primitive ops) becomes one guarded load of v(e); also when the sum widens small ints first (a cast around the select),
as a uint8 label lookup does. Checked through the kernels the CPU compiles (no loop over the table is left) and
against NumPy."""

import numpy as np
import pytest

from glassgrad import Context, Device, Tensor
from glassgrad.codegen import get_program
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.opt import main_reduce

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


def _heuristic_opts(out: Tensor, cache_bytes: int) -> tuple[list, list[int]]:
    """The CPU heuristics' actions for out's last kernel (with this cache declared), and its reduced axes."""
    ast = out.schedule()[-1].ast
    return hand_coded_opts(ast, Device["CPU"].renderer.vector_lanes, cache_bytes=cache_bytes), main_reduce(ast).arg[1]


@pytest.mark.parametrize("cache_bytes", [0, 64 << 10, 1 << 20])
def test_a_gather_from_a_large_table_is_no_reduction_to_chunk_or_unroll(cache_bytes):
    """X[idx] with a first dim of 8000, rows 1280 bytes apart (beautiful_mnist's batch from 60,000 images of 3136
    bytes, smaller): the heuristics take no action on the table's axis (a CHUNK of it read and wrote the whole output
    once a chunk), whatever the cache, and the kernel they choose has no loop over it; its values are NumPy's,
    negative indices from the end, and an index out of range raises as it does without them."""
    rows = 8000
    table = np.random.default_rng(2).standard_normal((rows, 16, 20)).astype(np.float32)
    picks = np.array([0, rows - 1, 5, -1, -rows, 17, rows // 2 + 1, 3] * 8, np.int32)
    x, idx = Tensor(table).realize(), Tensor(picks).realize()
    opts, reduced = _heuristic_opts(x[idx], cache_bytes)
    assert not [o for o in opts if o.op in ("UNROLL", "CHUNK", "GROUP") or o.axis in reduced], opts
    source = get_program(x[idx].schedule()[-1].ast, Device["CPU"].renderer, tuple(opts)).src
    assert f"< {rows};" not in source, "a loop over the whole table is left"
    np.testing.assert_array_equal(x[idx].numpy(), table[picks])
    for bad in (rows, -rows - 1):
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for dimension 0 with size {rows}"):
            x[Tensor(np.array([1, bad], np.int32))].numpy()
