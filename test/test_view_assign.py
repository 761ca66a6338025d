"""assign into a view of a buffer writes the buffer that other tensors hold, as torch's copy_ into a view does; and
DistributedDataParallel's gradient buffer is filled part by part, each gradient by a kernel of its own."""

import numpy as np
import pytest
import torch

from glassgrad import Tensor
from glassgrad.distributed.ddp import through_one_buffer
from glassgrad.runtime.counters import GlobalCounters

BASES = {
    "realized": lambda: Tensor.zeros(6, 5).contiguous().realize(),
    "lazy": lambda: Tensor.zeros(6, 5).contiguous(),
    "empty": lambda: Tensor.empty(6, 5),
}
VIEWS = {
    "rows": (slice(1, 3), slice(None)),
    "one": (4, slice(None)),
    "column": (slice(None), 2),  # strided
    "block": (slice(2, 6, 2), slice(1, 4)),
    "none": (slice(3, 3), slice(None)),  # 0-size
}


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("view", VIEWS)
def test_the_base_reads_what_was_assigned_to_its_view(base, view):
    t = BASES[base]()
    expected = torch.zeros(6, 5) if base != "empty" else None
    values = np.random.default_rng(0).standard_normal(tuple(torch.zeros(6, 5)[VIEWS[view]].shape)).astype(np.float32)
    t[VIEWS[view]].assign(Tensor(values))
    got = t.numpy()
    if expected is None:  # the rest of an empty buffer is whatever it held: compare the written part
        np.testing.assert_array_equal(got[VIEWS[view]], values)
        return
    expected[VIEWS[view]].copy_(torch.from_numpy(values))
    np.testing.assert_array_equal(got, expected.numpy())
    np.testing.assert_array_equal((t + 1).numpy(), expected.numpy() + 1)  # a graph built on the base after


def test_a_graph_built_on_the_base_before_the_assign_keeps_the_old_values():
    t = Tensor.arange(6).float().contiguous().realize()
    before = t * 2  # lazy: reads t's buffer
    t[1:3].assign(Tensor([10.0, 20.0]))
    np.testing.assert_array_equal(before.numpy(), np.arange(6) * 2)
    np.testing.assert_array_equal(t.numpy(), [0, 10, 20, 3, 4, 5])


@pytest.mark.parametrize("shapes", [[(4, 3), (5,), (2, 2, 2)], [(7,)], [(1,), (0,), (3, 1)]])
def test_one_buffer_holds_each_tensor_written_by_its_own_kernel(shapes):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    sources = [Tensor(a).realize() for a in arrays]
    lazy = [(s * 2).exp() for s in sources]  # pending work, which fuses into the write of each part
    GlobalCounters.reset()
    doubled = through_one_buffer(lazy, lambda flat: flat.assign(flat * 2).realize())
    # a kernel per non-empty part and one for run's doubling: a cat would be one kernel computing every part
    assert GlobalCounters.kernel_count == sum(a.size > 0 for a in arrays) + 1
    for got, a in zip(doubled, arrays):
        assert got.shape == a.shape
        np.testing.assert_allclose(got.numpy(), np.exp(a * 2) * 2, rtol=1e-6)


def _kernel_names(out: str) -> list[str]:
    return [line.split()[3] for line in out.splitlines() if line.startswith("*** ")]


def test_a_product_written_into_the_buffer_runs_the_kernel_it_runs_alone(capsys):
    """A weight gradient keeps its rows and columns in its part of the buffer: written flat it is no matmul (on an
    H200, GPT-2's gradients ran at 4.7 TFLOP/s there against 26 alone)."""
    from glassgrad import Context

    a, b = Tensor.rand(256, 64).realize(), Tensor.rand(256, 96).realize()
    capsys.readouterr()
    with Context(DEBUG=2):
        alone = (a.T @ b).realize()
        parts = through_one_buffer([a.T @ b, a.sum(0)], lambda flat: flat.realize())
    names = _kernel_names(capsys.readouterr().out)
    assert len(names) == 3 and names[1] == names[0]
    np.testing.assert_allclose(parts[0].numpy(), alone.numpy(), rtol=1e-6)
    np.testing.assert_allclose(parts[1].numpy(), a.numpy().sum(0), rtol=1e-5)
