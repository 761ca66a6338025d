"""glassgrad/distributed/nccl.py's ctypes calls, checked without a GPU against a stand-in libnccl.

The stand-in (C, compiled here) has NCCL's signatures and plays the other ranks: each holds the same values as this
one, and "device" pointers are host memory. It records what it was passed, so the tests see that the unique id
crosses whole (zero bytes and all), by value, and that each collective gets its counts, dtype, op and root.
"""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from glassgrad import dtypes
from glassgrad.distributed import nccl
from glassgrad.runtime.ops_cpu import find_c_compiler

FAKE_NCCL = r"""
#include <string.h>
#include <stddef.h>
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { ncclUniqueId id; int nranks, rank; } Comm;
static Comm comm;
long long last[6];  /* the last collective: kind, count, dtype, op or root, stream, comm */
int ncclGetVersion(int *v) { *v = 22105; return 0; }
int ncclGetUniqueId(ncclUniqueId *id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i % 3 ? i : 0); return 0; }
int ncclCommInitRank(void **c, int nranks, ncclUniqueId id, int rank) {
  comm.id = id; comm.nranks = nranks; comm.rank = rank; *c = &comm; return 0; }
void received_id(char *out) { memcpy(out, comm.id.internal, 128); }
static void note(int kind, size_t count, int dtype, int arg, void *stream, void *c) {
  last[0] = kind; last[1] = (long long)count; last[2] = dtype; last[3] = arg; last[4] = (long long)stream;
  last[5] = c == &comm; }
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) {
  note(0, n, dt, op, st, c); for (size_t i = 0; i < n; i++) ((float *)r)[i] = ((const float *)s)[i] * comm.nranks;
  return dt == 7 ? 0 : 5; }
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *c, void *st) {
  note(1, n, dt, root, st, c); memmove(r, s, n * 4); return 0; }
int ncclAllGather(const void *s, void *r, size_t n, int dt, void *c, void *st) {
  note(2, n, dt, -1, st, c); for (int k = 0; k < comm.nranks; k++) memcpy((float *)r + k * n, s, n * 4); return 0; }
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) {
  note(3, n, dt, op, st, c);
  for (size_t i = 0; i < n; i++) ((float *)r)[i] = ((const float *)s)[comm.rank * n + i] * comm.nranks; return 0; }
int ncclCommDestroy(void *c) { return 0; }
const char *ncclGetErrorString(int code) { return code == 5 ? "invalid usage" : "unknown"; }
const char *ncclGetLastError(void *c) { return "the stand-in sums float32 only"; }
"""


class FakeDevice:
    """What Communicator asks of a CUDA device."""

    def activate(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


class HostBuffer:
    """What NcclCollective asks of a Buffer: a pointer, a size, a dtype."""

    def __init__(self, values: np.ndarray):
        self.array = np.ascontiguousarray(values, dtype=np.float32)
        self.handle, self.size, self.dtype = self.array.ctypes.data, self.array.size, dtypes.float32


@pytest.fixture
def fake_nccl(tmp_path, monkeypatch):
    source, library = tmp_path / "nccl.c", tmp_path / "libnccl.so.2"
    source.write_text(FAKE_NCCL)
    subprocess.run([find_c_compiler(), "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True)
    monkeypatch.setenv("NCCL_LIBRARY", str(library))
    nccl.libnccl.cache_clear()
    yield ctypes.CDLL(str(library))
    nccl.libnccl.cache_clear()


def test_the_unique_id_crosses_whole(fake_nccl):
    unique_id = nccl.new_unique_id()
    assert len(unique_id) == 128 and unique_id[0] == 0 and unique_id[1] == 1  # zeros inside, not a C string
    nccl.Communicator(FakeDevice(), unique_id, 2, 1)  # type: ignore[arg-type]
    received = ctypes.create_string_buffer(128)
    fake_nccl.received_id(received)
    assert received.raw == unique_id
    assert nccl.version() == "2.21.5"


CALLS = [("all_reduce", "avg", 0, 6), ("broadcast", "sum", 1, 6), ("all_gather", "sum", 0, 12),
         ("reduce_scatter", "max", 0, 3)]  # fmt: skip


@pytest.mark.parametrize("kind, op, root, n_out", CALLS)
def test_each_collective_passes_its_count_dtype_op_and_root(fake_nccl, kind, op, root, n_out):
    communicator = nccl.Communicator(FakeDevice(), bytes(128), 2, 1)  # type: ignore[arg-type]
    src, out = HostBuffer(np.arange(6) + 0.5), HostBuffer(np.zeros(n_out))
    nccl.NcclCollective(communicator, kind, op, root)([out, src], wait=True)  # type: ignore[list-item]
    x = src.array
    want = {"all_reduce": x * 2, "broadcast": x, "all_gather": np.concatenate([x, x]), "reduce_scatter": x[3:] * 2}
    np.testing.assert_array_equal(out.array, want[kind])
    last = list((ctypes.c_longlong * 6).in_dll(fake_nccl, "last"))
    kinds = ["all_reduce", "broadcast", "all_gather", "reduce_scatter"]
    argument = root if kind == "broadcast" else -1 if kind == "all_gather" else nccl.NCCL_OPS[op]
    # all_gather's count is what each rank sends; reduce_scatter's what each receives; the default stream is NULL
    assert last == [kinds.index(kind), 3 if kind == "reduce_scatter" else 6, 7, argument, 0, 1]


def test_an_nccl_failure_carries_its_words(fake_nccl):
    communicator = nccl.Communicator(FakeDevice(), bytes(128), 2, 0)  # type: ignore[arg-type]
    with pytest.raises(nccl.DistBackendError, match=r"nccl all_reduce failed: invalid usage \(5\): the stand-in"):
        communicator.run("all_reduce", 0, 0, 0, dtypes.float16, "sum", 0)


def test_a_dtype_nccl_lacks_is_named():
    with pytest.raises(TypeError, match=r"all_reduce: NCCL has no dtypes.short type \(it has dtypes.bfloat16"):
        nccl.nccl_dtype(dtypes.int16, "all_reduce")
