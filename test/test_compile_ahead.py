"""compile_ahead: a schedule's new kernels are rendered in order and compiled side by side, with the same results."""

import threading
import time

import numpy as np
import pytest

from glassgrad import Device, Tensor
from glassgrad.engine import realize


def _fresh_kernels(n: int, salt: float | None = None) -> tuple[list[Tensor], list[np.ndarray]]:
    """n outputs, each its own kernel, with constants no earlier test compiled unless `salt` is given again."""
    salt = time.time_ns() % 1_000_003 / 7.0 if salt is None else salt
    xs = np.random.rand(n, 33).astype(np.float32)
    outs = [(Tensor(xs[i]) * (i + 2.5) + salt).sum() for i in range(n)]
    return outs, [(xs[i] * np.float32(i + 2.5) + np.float32(salt)).sum() for i in range(n)]


def test_new_kernels_compile_side_by_side(monkeypatch):
    compiler = Device[Device.DEFAULT].compiler
    original, running, most = compiler.compile_cached, [0], [0]
    lock = threading.Lock()

    def slow_compile(src: str) -> bytes:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)  # long enough that a second compile starts before the first ends
        try:
            return original(src)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(compiler, "compile_cached", slow_compile)
    monkeypatch.setattr(realize.os, "cpu_count", lambda: 4)
    outs, expected = _fresh_kernels(4)
    Tensor.realize(*outs)
    assert most[0] >= 2, "the kernels were compiled one after another"
    np.testing.assert_allclose([o.item() for o in outs], expected, rtol=1e-5)


def test_compile_error_reaches_the_caller(monkeypatch):
    compiler = Device[Device.DEFAULT].compiler

    def broken(src: str) -> bytes:
        raise RuntimeError("compiler said no")

    monkeypatch.setattr(compiler, "compile_cached", broken)
    outs, _ = _fresh_kernels(3)
    with pytest.raises(RuntimeError, match="compiler said no"):
        Tensor.realize(*outs)


def test_kernels_compiled_once_are_not_compiled_again(monkeypatch):
    salt = time.time_ns() % 1_000_003 / 7.0
    Tensor.realize(*_fresh_kernels(3, salt)[0])
    compiler, calls = Device[Device.DEFAULT].compiler, []
    monkeypatch.setattr(compiler, "compile_cached", lambda src: calls.append(src) or b"")
    outs, expected = _fresh_kernels(3, salt)  # the same kernels over new data
    np.testing.assert_allclose([o.item() for o in Tensor.realize(*outs) and outs], expected, rtol=1e-5)
    assert calls == []
