"""The CPU allocator hands large freed buffers out again (no new pages to fault in and zero), within a bound, and maps
buffers of 2 MiB or more on their own, aligned for huge pages."""

import ctypes
import os

import numpy as np
import pytest

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


def test_a_buffer_of_huge_page_size_starts_on_a_huge_page_and_is_zeroed():
    nbytes = ops_cpu.HUGE_PAGE + 12345  # not a multiple of the page: the mapping rounds up, the buffer must not care
    raw, address = ops_cpu.CPUAllocator().alloc(nbytes)
    assert address % ops_cpu.HUGE_PAGE == 0
    view = (ctypes.c_uint8 * nbytes).from_address(address)
    assert not any(bytes(view)), "fresh memory reads as zeros"
    view[0], view[nbytes - 1] = 7, 9  # every byte asked for is writable
    assert (view[0], view[nbytes - 1]) == (7, 9)


def test_a_huge_page_buffer_is_private_to_the_process_after_a_fork():
    raw, address = ops_cpu.huge_page_buffer(ops_cpu.HUGE_PAGE)
    view = (ctypes.c_uint8 * 8).from_address(address)
    view[0] = 1
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork on this platform")
    pid = os.fork()
    if pid == 0:  # the child writes its copy and leaves at once, whatever happens
        try:
            view[0] = 2
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert view[0] == 1, "a shared mapping would have let the child's write through"


def test_large_tensors_on_huge_pages_compute_and_free_like_any_other():
    rng = np.random.default_rng(1)
    m = rng.standard_normal((1024, 1030)).astype(np.float32)  # 4.2 MB: above HUGE_PAGE
    for _ in range(3):  # the second and third outputs reuse the freed mappings
        np.testing.assert_allclose(Tensor(m).sum(axis=1).numpy(), m.sum(axis=1), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose((Tensor(m) * 2 + 1).numpy(), m * 2 + 1, rtol=1e-6)
