"""The CPU device's C compiler flags: GCC-only flags go to GCC alone (clang rejects them), whatever its name."""

import os

import pytest

import glassgrad.runtime.ops_cpu as ops_cpu

BANNERS = {  # what `--version` prints first
    "gcc": "cc (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n",
    "clang": "Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\nThread model: posix\n",
    "apple clang": "Apple clang version 15.0.0 (clang-1500.3.9.4)\nTarget: arm64-apple-darwin23.4.0\n",
}


def fake_compiler(tmp_path, banner: str) -> str:
    """An executable named cc that answers --version with `banner`."""
    path = tmp_path / "cc"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{banner}EOF\n")
    os.chmod(path, 0o755)
    return str(path)


@pytest.mark.parametrize("kind", sorted(BANNERS))
def test_gcc_only_flags_go_to_gcc_whatever_it_is_called(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("CC", fake_compiler(tmp_path, BANNERS[kind]))
    compiler = ops_cpu.CCompiler()
    assert ("-fno-predictive-commoning" in compiler.flags) == (kind == "gcc")
    assert ("-fno-predictive-commoning" in compiler.cache_key) == (kind == "gcc")  # a flag change recompiles


def test_a_missing_compiler_is_not_taken_for_gcc():
    assert not ops_cpu._is_gcc("/nonexistent/cc")


def test_the_default_compiler_builds_a_kernel_with_its_flags():
    compiler = ops_cpu.CCompiler()
    program = ops_cpu.CPUProgram("f", compiler.compile("int f(void) { return 7; }"))
    program.fn.restype = ops_cpu.ctypes.c_int
    assert program.fn() == 7
