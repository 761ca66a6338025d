"""Threads: TinyJit steps in two threads give what they give one after the other, a thread's capture holds only its
own work, random draws are never repeated, and shared tables (interned nodes, devices, freed memory) stay whole."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from glassgrad import Device, Tensor, TinyJit, dtypes
from glassgrad.nn.optim import SGD
from glassgrad.runtime.device import Compiled
from glassgrad.runtime.ops_cpu import CPUAllocator, CpuDevice
from glassgrad.uop.ops import Ops, UOp

STEPS = 12


@pytest.fixture
def often_switching():
    """Threads switch every microsecond instead of every 5 ms, so that races show up in a short test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def in_threads(work: Callable[[int], object], count: int = 2) -> list:
    """work(i) in `count` threads started together; their results, or the first exception one raised."""
    results: list = [None] * count
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def train(seed: int) -> tuple[list[float], np.ndarray]:
    """STEPS TinyJit steps of SGD on a linear model of its own: the losses and the final weight."""
    rng = np.random.default_rng(seed)
    w = Tensor(rng.standard_normal((8, 4)).astype(np.float32), requires_grad=True)
    opt = SGD([w], lr=0.1)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.realize()

    batches = [(rng.standard_normal((16, 8)), rng.standard_normal((16, 4))) for _ in range(STEPS)]
    losses = [step(Tensor(x.astype(np.float32)), Tensor(y.astype(np.float32))).item() for x, y in batches]
    return losses, w.numpy()


def test_tinyjit_steps_in_two_threads_give_what_they_give_one_after_the_other():
    alone = [train(seed) for seed in (1, 2)]
    together = in_threads(lambda i: train(i + 1))
    for (losses, w), (t_losses, t_w) in zip(alone, together):
        assert losses == t_losses  # bit for bit
        np.testing.assert_array_equal(w, t_w)


def test_a_capture_does_not_take_another_threads_pending_assign():
    other = Tensor([10.0, 20.0]).contiguous().realize()
    assigned = threading.Event()
    captured = threading.Event()

    def other_thread(_: int) -> None:
        other.assign(other + 1.0)  # lazy: this thread realizes it when it wants to
        assigned.set()
        captured.wait(timeout=120)

    def jit_thread(_: int) -> list[float]:
        assigned.wait(timeout=120)
        state = Tensor([0.0]).contiguous().realize()

        @TinyJit
        def step() -> Tensor:
            state.assign(state + 2.0)
            return state

        values = [step().item() for _ in range(4)]
        captured.set()
        return values

    _, values = in_threads(lambda i: (other_thread, jit_thread)[i](i))
    assert values == [2.0, 4.0, 6.0, 8.0]
    assert other.uop.op is Ops.ASSIGN  # still the other thread's to realize
    assert other.tolist() == [11.0, 21.0]  # added once, not once more per replay of the capture


def test_random_draws_from_two_threads_each_advance_the_generator(often_switching):
    Tensor.manual_seed(7)
    start = Tensor._rng_state(Device.DEFAULT).tolist()
    in_threads(lambda i: [Tensor.rand(64).realize() for _ in range(100)], count=4)  # each reads the state, adds 64
    key, counter = Tensor._rng_states[Device.DEFAULT].tolist()
    assert key == start[0] and counter == start[1] + 4 * 100 * 64  # no advance lost: no two draws read one state


def test_nodes_built_at_once_by_several_threads_are_one_node_each(often_switching):
    def build(_: int) -> list[UOp]:
        return [UOp(Ops.CONST, dtypes.float32, (), float(k) + 0.5) for k in range(3000)]

    nodes = in_threads(build, count=4)
    for k in range(3000):
        assert all(found[k] is nodes[0][k] for found in nodes), f"constant {k + 0.5} was interned twice"


def test_a_device_asked_for_by_two_threads_at_once_is_opened_once(monkeypatch):
    opened: list[Compiled] = []

    def slow_device(name: str) -> Compiled:
        time.sleep(0.2)  # both threads ask while it opens
        opened.append(CpuDevice(name))
        return opened[-1]

    monkeypatch.setattr(Device, "_registered", {**Device._registered})
    monkeypatch.setattr(Device, "_opened", {**Device._opened})
    Device.register("SLOWDEV", slow_device)
    found = in_threads(lambda i: Device["SLOWDEV"])
    assert len(opened) == 1 and found[0] is found[1] is opened[0]


class SlowList(list):
    """A list whose pop lets other threads run first, as a thread switch at the worst moment would."""

    def pop(self, *index):
        time.sleep(0.001)
        return super().pop(*index)


def test_the_last_freed_buffer_taken_by_two_threads_at_once_goes_to_one_of_them():
    allocator, size = CPUAllocator(), 1 << 20
    allocator.free(allocator.alloc(size), size)  # one buffer kept for reuse
    allocator.freed[size] = SlowList(allocator.freed[size])
    handles = in_threads(lambda i: allocator.alloc(size))  # before: both saw it, the second to pop found none
    assert handles[0][1] != handles[1][1] and allocator.freed_bytes == 0 and not allocator.freed[size]
