"""DEBUG output: a line per kernel with time, GFLOP/s and GB/s, the summary at exit, plain text off a terminal."""

import io
import os
import pathlib
import pty
import re
import subprocess
import sys

import numpy as np
import pytest

from glassgrad import Context, Device, GlobalCounters, Tensor
from glassgrad.codegen import get_program
from glassgrad.engine import debug
from glassgrad.helpers import colored
from glassgrad.uop.ops import Ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
KERNEL_LINE = re.compile(
    r"^\*\*\* (?P<device>\S+)\s+(?P<index>\d+) (?P<name>[Er]_\S+)\s+tm\s+(?P<us>\d+\.\d+)us\s+"
    r"(?P<gflops>\d+\.\d+) GFLOPS\s+(?P<gbs>\d+\.\d+) GB/s$"
)
SUMMARY = re.compile(r"^summary: (?P<runs>\d+) runs of (?P<kernels>\d+) kernels in (?P<ms>\d+\.\d+) ms")


def run_python(code: str, env: dict[str, str], tty: bool = False) -> str:
    """Run `code` in a fresh interpreter with this worktree's glassgrad; its stdout a pipe, or a terminal if `tty`."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    if not tty:
        done = subprocess.run([sys.executable, "-c", code], env=full_env, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], env=full_env, cwd=ROOT, stdout=terminal, stderr=terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the program ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert proc.wait() == 0, b"".join(chunks).decode()
    return b"".join(chunks).decode()


@pytest.fixture
def fresh_summary():
    debug.reset_summary()
    yield
    debug.reset_summary()


# ---- what GFLOP/s and GB/s are computed from ----


@pytest.mark.parametrize("m,k,n", [(16, 16, 16), (7, 13, 5), (3, 100, 2), (1, 5, 1), (33, 2, 9)])
def test_matmul_counts_two_flops_per_multiply_add(m, k, n):
    a = Tensor(np.random.rand(m, k).astype(np.float32)).realize()
    b = Tensor(np.random.rand(k, n).astype(np.float32)).realize()
    GlobalCounters.reset()
    (a @ b).realize()
    # k multiplies and k adds per output (k - 1 where the sum is unrolled completely); index math is not counted
    assert 2 * m * n * k - m * n <= GlobalCounters.global_ops <= 2 * m * n * k


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (4, 1, 6)])
def test_elementwise_counts_one_op_per_element_and_its_bytes(shape):
    x = Tensor(np.random.rand(*shape).astype(np.float32)).realize()
    GlobalCounters.reset()
    (x * 2).realize()
    size = int(np.prod(shape))
    assert (GlobalCounters.global_ops, GlobalCounters.global_mem) == (size, 2 * 4 * size)  # read and write floats


def test_padding_gates_are_index_math():
    x = Tensor(np.random.rand(3, 4).astype(np.float32)).realize()
    GlobalCounters.reset()
    (x.pad(((0, 0), (2, 1))) + 1).realize()  # one add per output element; the gate of the padded load is free
    assert GlobalCounters.global_ops == 3 * 7


# ---- the lines and the summary ----


def expected_names(*tensors: Tensor) -> list[str]:
    """The names of the kernels that realizing `tensors` one after another runs, as codegen names them."""
    return [debug.plain(get_program(s.ast, Device[t.device].renderer).name)
            for t in tensors for s in t.schedule() if s.ast.op is Ops.SINK]  # fmt: skip


def test_debug2_prints_a_line_per_kernel_and_a_summary(capsys, fresh_summary):
    x = Tensor(np.random.rand(5, 6).astype(np.float32)).realize()
    reduced, added = (x * 3.25).sum(axis=1), x + 1.5
    names = expected_names(reduced, added)
    with Context(DEBUG=2):
        Tensor.realize(reduced)
        Tensor.realize(added)
    lines = [ANSI.sub("", line) for line in capsys.readouterr().out.splitlines()]
    kernels = [m for line in lines if (m := KERNEL_LINE.match(line))]
    assert [m["name"] for m in kernels] == names and len(names) == 2
    assert all(float(m["us"]) > 0 for m in kernels)
    summary = debug.summary().splitlines()
    assert SUMMARY.match(summary[0])["runs"] == "2"
    assert {line.split()[-1] for line in summary[4:]} == set(names)


def test_summary_lists_the_slowest_first_and_at_most_ten(fresh_summary):
    x = Tensor(np.random.rand(3).astype(np.float32)).realize()
    with Context(DEBUG=2):
        for i in range(12):
            (x + (100 + i)).realize()  # twelve different kernels
    rows = debug.summary().splitlines()[4:]
    assert len(rows) == debug.SLOWEST_SHOWN
    times = [float(row.split()[0]) for row in rows]
    assert times == sorted(times, reverse=True)


def test_debug_below_2_prints_no_kernel_lines(capsys, fresh_summary):
    x = Tensor(np.random.rand(4).astype(np.float32)).realize()
    with Context(DEBUG=1):
        (x + 2.75).realize()
    out = capsys.readouterr().out
    assert "realize: 1 kernels" in out and not any(KERNEL_LINE.match(line) for line in out.splitlines())
    assert SUMMARY.match(debug.summary())["runs"] == "0"


# ---- color ----


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("no_color, tty, expect_color", [(None, True, True), ("1", True, False), ("", True, True),
                                                         (None, False, False), ("1", False, False)])  # fmt: skip
def test_colored_only_on_a_terminal_without_NO_COLOR(monkeypatch, no_color, tty, expect_color):
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    monkeypatch.setattr(sys, "stdout", FakeTerminal() if tty else io.StringIO())
    assert colored("E_4", "blue") == ("\x1b[34mE_4\x1b[0m" if expect_color else "E_4")


PROGRAM = "from glassgrad import Tensor; print((Tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist())"


@pytest.mark.parametrize("no_color, tty", [("1", True), (None, False)])
def test_debug_output_is_plain_with_NO_COLOR_or_without_a_terminal(no_color, tty):
    env = {"DEBUG": "2"} | ({"NO_COLOR": no_color} if no_color else {})
    out = run_python(PROGRAM, env, tty=tty).replace("\r\n", "\n")
    assert "\x1b[" not in out
    assert any(KERNEL_LINE.match(line) for line in out.splitlines()) and "summary: " in out


def test_debug_output_is_colored_on_a_terminal():
    out = run_python(PROGRAM, {"DEBUG": "2", "NO_COLOR": ""}, tty=True)  # an empty NO_COLOR asks for nothing
    kernel_line = next(line for line in out.splitlines() if line.startswith("*** "))
    assert "\x1b[" in kernel_line and KERNEL_LINE.match(ANSI.sub("", kernel_line).rstrip("\r"))


# ---- the acceptance check: a beautiful_mnist training step at DEBUG=2 ----

MNIST_STEP = """
import sys
sys.path.insert(0, "examples")
from beautiful_mnist import Model
from glassgrad import GlobalCounters, Tensor, TinyJit, nn

Tensor.manual_seed(0)
model = Model()
optimizer = nn.optim.Adam(nn.state.get_parameters(model))
X, Y = Tensor.randn(8, 1, 28, 28).realize(), Tensor.randint(8, high=10).realize()

@TinyJit
def train_step():
    with Tensor.train():
        optimizer.zero_grad()
        loss = model(X).sparse_categorical_crossentropy(Y).backward()
        optimizer.step()
        return loss

for _ in range(3):  # run, capture, replay
    train_step()
print("kernels run:", GlobalCounters.kernel_count)
"""


@pytest.mark.slow
def test_beautiful_mnist_step_at_debug2_shows_every_kernel_with_time_and_gflops():
    # JIT_GRAPH=0: on a GPU, replays through a CUDA graph would print one line for the whole graph
    lines = run_python(MNIST_STEP, {"DEBUG": "2", "JIT_GRAPH": "0"}).splitlines()
    kernel_lines = [line for line in lines if line.startswith("*** ")]
    parsed = [KERNEL_LINE.match(line) for line in kernel_lines]
    assert all(parsed), [line for line, m in zip(kernel_lines, parsed) if not m]
    ran = int(next(line for line in lines if line.startswith("kernels run:")).split()[-1])
    assert len(parsed) == ran > 100  # every kernel that ran has its line, replays included
    assert all(float(m["us"]) > 0 for m in parsed)
    convolutions = [m for m in parsed if m["name"].count("_") >= 6]  # r_8_32_20_20_5_5_32 and the like
    assert convolutions and all(float(m["gflops"]) > 0 for m in convolutions)
    summary = SUMMARY.match(next(line for line in lines if line.startswith("summary: ")))
    assert int(summary["runs"]) == ran and float(summary["ms"]) > 0
    slowest = lines[lines.index(summary.string) + 4 :]
    assert len(slowest) == debug.SLOWEST_SHOWN and all(
        row.split()[-1] in {m["name"] for m in parsed} for row in slowest
    )
