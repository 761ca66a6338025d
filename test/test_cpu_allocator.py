"""The CPU allocator hands large freed buffers out again (no new pages to fault in and zero), within a bound."""

import numpy as np

import glassgrad.runtime.ops_cpu as ops_cpu
from glassgrad import Tensor


def test_a_large_freed_buffer_is_handed_out_again_for_its_size():
    allocator = ops_cpu.CPUAllocator()
    size = ops_cpu.REUSE_MIN_BYTES
    first = allocator.alloc(size)
    allocator.free(first, size)
    assert allocator.alloc(size) is first
    other = allocator.alloc(size)
    assert other is not first and other[1] % ops_cpu.ALIGN == 0


def test_small_buffers_are_not_kept_and_the_kept_bytes_are_bounded(monkeypatch):
    monkeypatch.setattr(ops_cpu, "REUSE_MAX_BYTES", 3 * ops_cpu.REUSE_MIN_BYTES)
    allocator = ops_cpu.CPUAllocator()
    small = allocator.alloc(1024)
    allocator.free(small, 1024)
    assert allocator.freed_bytes == 0 and allocator.alloc(1024) is not small
    size = ops_cpu.REUSE_MIN_BYTES
    handles = [allocator.alloc(size) for _ in range(5)]
    for h in handles:
        allocator.free(h, size)
    assert allocator.freed_bytes == 3 * size
    assert [allocator.alloc(size) for _ in range(3)] == handles[:1:-1]  # the latest freed first; the oldest dropped


def test_results_stay_right_when_outputs_reuse_freed_memory():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 520)).astype(np.float32), rng.standard_normal((520, 512)).astype(np.float32)
    ta, tb = Tensor(a).realize(), Tensor(b).realize()
    for scale in (1.0, 2.0, -3.0):  # each product's output (1 MiB) lands in the one freed before it
        np.testing.assert_allclose(((ta * scale) @ tb).numpy(), (a * scale) @ b, rtol=1e-4, atol=1e-3)
