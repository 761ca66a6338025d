"""The program cache on disk (engine/program_cache.py) and the line a long compile prints (engine/compile_progress.py):
a kernel made by an earlier process is neither lowered nor compiled again, and gives the same values."""

import re
import time

import numpy as np
import pytest

from glassgrad import Context, Device, Tensor, disk_cache
from glassgrad.engine import compile_progress, program_cache, realize
from helpers import count_calls


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder; counts of the kernels lowered (codegen) and compiled (the C compiler or NVRTC)."""
    monkeypatch.setenv("GLASSGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
    monkeypatch.setattr(disk_cache, "_usable", {})
    counts: dict[str, int] = {}
    count_calls(monkeypatch, counts, "lowered", realize, "_program_spec")
    count_calls(monkeypatch, counts, "compiled", Device[Device.DEFAULT].compiler, "compile")
    return counts


def as_a_new_process() -> None:
    """Forget every kernel this process made, as a new process starts with none."""
    realize._kernels.clear()
    Device[Device.DEFAULT].programs.clear()


def program(x: np.ndarray, salt: float) -> np.ndarray:
    """Three kernels (a sum needs the elementwise result first), with a constant no other test compiled."""
    t = Tensor(x)
    return ((t * salt - 0.5).exp() / (t * salt - 0.5).exp().sum()).numpy()


def test_a_kernel_made_by_an_earlier_process_is_neither_lowered_nor_compiled(fresh_cache):
    x, salt = np.linspace(-1, 1, 37, dtype=np.float32), 1 + time.time_ns() % 1_000_003 / 7e6
    expected = np.exp(x * np.float32(salt) - 0.5) / np.exp(x * np.float32(salt) - 0.5).sum()
    first = program(x, salt)
    made = dict(fresh_cache)
    assert made["lowered"] >= 2 and made["compiled"] >= 2
    as_a_new_process()
    second = program(x, salt)
    assert fresh_cache == made, "a kernel was lowered or compiled again"
    np.testing.assert_allclose(first, expected, rtol=1e-5)
    assert np.array_equal(first, second)


def test_flags_that_choose_the_optimizations_make_their_own_entry(fresh_cache):
    x, salt = np.linspace(-1, 1, 37, dtype=np.float32), 1 + time.time_ns() % 1_000_003 / 7e6
    optimized = program(x, salt)
    lowered = fresh_cache["lowered"]
    as_a_new_process()
    with Context(NOOPT=1):
        plain = program(x, salt)
    assert fresh_cache["lowered"] > lowered, "NOOPT=1 was served the optimized programs"
    np.testing.assert_allclose(plain, optimized, rtol=1e-6)


def test_a_spec_loaded_from_the_cache_is_the_spec_made(fresh_cache):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(x).realize()
    (item,) = (t.sum(axis=1) * 0.25).schedule()
    made = realize._program_spec(Device.DEFAULT, item.ast)
    flags = realize._kernel_key(Device.DEFAULT, item.ast)[2:]
    program_cache.store_spec(Device.DEFAULT, item.ast, flags, made)
    loaded = program_cache.load_spec(Device.DEFAULT, item.ast, flags)
    assert loaded is not None and loaded.program == () and loaded == type(made)(**{**vars(made), "program": ()})
    with Context(DEBUG=4):  # DEBUG=4 shows the linear program, which a loaded spec lacks: the cache stands aside
        assert program_cache.load_spec(Device.DEFAULT, item.ast, flags) is None


def test_the_ast_text_tells_apart_what_the_graph_does():
    a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
    asts = [t.schedule()[-1].ast for t in (a * 2, a * 3, a * 0.0, a * -0.0, a.cast("float16") * 2, b * 2)]
    texts = [program_cache.ast_text(ast) for ast in asts]
    assert asts[0] is asts[-1] and texts[0] == texts[-1]  # the same kernel on other buffers
    assert len(set(texts[:-1])) == len(set(asts[:-1])) == 5


def slow_compiles(monkeypatch, seconds: float) -> None:
    compiler = Device[Device.DEFAULT].compiler
    original = compiler.compile_cached

    def slow(src: str) -> bytes:
        time.sleep(seconds)
        return original(src)

    monkeypatch.setattr(compiler, "compile_cached", slow)


def two_new_kernels() -> list[Tensor]:
    salt = time.time_ns() % 1_000_003 / 7.0
    return [Tensor([1.0, 2.0, 3.0]) * salt, (Tensor([4.0, 5.0]) + salt).sum()]


def test_a_long_compile_says_so_in_one_line_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(compile_progress, "AFTER_S", 0.05)
    slow_compiles(monkeypatch, 0.3)
    capsys.readouterr()
    Tensor.realize(*two_new_kernels())
    err = capsys.readouterr().err
    assert re.fullmatch(rf"glassgrad: compiling 2 kernels for {Device.DEFAULT}\.\.\. done in \d+\.\d s\n", err), err


def test_a_short_compile_or_progress_0_says_nothing(monkeypatch, capsys):
    slow_compiles(monkeypatch, 0.3)
    capsys.readouterr()
    Tensor.realize(*two_new_kernels())  # 0.3 s: under a second
    monkeypatch.setattr(compile_progress, "AFTER_S", 0.05)
    with Context(PROGRESS=0):
        Tensor.realize(*two_new_kernels())
    assert capsys.readouterr().err == ""
