"""The CUDA device: memory, copies, launches, driver errors, devices meeting, half and bfloat16 on the GPU.

The renderer's and the library search's tests run everywhere; the rest need a GPU and skip, saying why, where
CUDA is unavailable (as on CI).
"""

import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from glassgrad import Device, Tensor, TinyJit, dtypes
from glassgrad.codegen import get_program
from glassgrad.codegen.heuristics import GROUP_THREADS
from glassgrad.codegen.opt import Opt
from glassgrad.renderer.cuda import HOPPER_CONFIGS, CUDARenderer, float_to_half_bits
from glassgrad.runtime import ops_cuda
from glassgrad.runtime.device import Buffer
from glassgrad.runtime.ops_cuda import CUDAError, CUDAUnavailable
from helpers import CUDA_MISSING, assert_matches, needs_gpu, needs_nvrtc, random_array

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


MISSING = CUDA_MISSING


def _kernels(t: Tensor) -> list:
    return [get_program(item.ast, CUDARenderer()) for item in t.schedule() if item.ast.op.name == "SINK"]


# ---- everywhere: the renderer, the library search, the default device ----


def test_outer_output_loop_is_the_grid():
    x = Tensor(np.arange(1000, dtype=np.float32), device="CPU").realize()
    (spec,) = _kernels(x.reshape(10, 100).sum(axis=1) * 2)
    assert spec.global_size == (10,)
    assert 'extern "C" __global__ void' in spec.src
    assert "int gidx = blockIdx.x*blockDim.x+threadIdx.x; int ridx0 = gidx; if (gidx < 10) {" in spec.src
    assert "for (int ridx1 = 0;" in spec.src  # the reduction stays a loop inside each thread
    assert "start" not in spec.src and "end" not in spec.src


def test_nested_output_loops_share_one_grid():
    x = Tensor(np.ones((4, 5, 6), np.float32), device="CPU").realize()
    (spec,) = _kernels(x.permute(2, 1, 0) + 1)  # three output axes, none of which merge with the next
    assert spec.global_size == (120,) and spec.local_size is None
    assert "int ridx0 = (gidx/20);" in spec.src and "int ridx1 = ((gidx/4)%5); {" in spec.src
    assert "int ridx2 = (gidx%4); {" in spec.src and "for (" not in spec.src


def test_a_short_outer_loop_gets_a_block_of_threads_per_iteration():
    x = Tensor(np.ones((20, 3000), np.float32), device="CPU").realize()
    (whole,) = _kernels(x.sum())
    assert whole.global_size is None and whole.local_size == (GROUP_THREADS,)
    assert re.search(rf"for \(int (ridx\d+) = threadIdx.x; \1 < \d+; \1 \+= {GROUP_THREADS}\)", whole.src)
    assert "__syncthreads();" in whole.src and "if ((threadIdx.x<1)) *(data0+0) = red0;" in whole.src
    (rows,) = _kernels(x.max(axis=1))
    assert rows.global_size == (20,) and rows.local_size == (GROUP_THREADS,)
    assert "int gidx = blockIdx.x; int ridx0 = gidx; if (gidx < 20) {" in rows.src


def test_a_long_outer_loop_or_a_short_reduction_keeps_a_thread_per_iteration():
    x = Tensor(np.ones((9000, 200), np.float32), device="CPU").realize()
    for t in (x.sum(axis=1), x[:, :5].sum(axis=1), x[:100, :100].sum(axis=1)):
        (spec,) = _kernels(t)
        assert spec.local_size is None and "__syncthreads" not in spec.src


def test_half_and_bfloat16_are_their_bits_with_ptx_conversions():
    x = Tensor(np.ones(5, dtype=np.float16), device="CPU").realize()
    (spec,) = _kernels((x * 1.5).cast(dtypes.bfloat16))
    assert "cvt.rn.f16.f32" in spec.src and "gg_f2bf" in spec.src
    assert f"((unsigned short){float_to_half_bits(1.5)})" in spec.src
    assert "#include" not in spec.src  # NVRTC needs no toolkit header


@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, -2.5, 65504.0, 65520.0, -1e9, 6e-8, float("inf"), float("-inf")])
def test_half_constant_bits_match_numpy(value):
    with np.errstate(over="ignore"):  # 65520 and -1e9 round to infinity
        assert float_to_half_bits(value) == int(np.array(value, dtype=np.float16).view(np.uint16))


def test_half_constant_nan_is_a_quiet_nan():
    assert np.isnan(np.array(float_to_half_bits(float("nan")), dtype=np.uint16).view(np.float16))


def test_missing_library_says_what_was_looked_for(monkeypatch, tmp_path):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    message = r"CUDA is unavailable: the driver \(libcuda.so\) was not found; looked in the loader's cache \(ldconfig\)"
    with pytest.raises(CUDAUnavailable, match=rf"{message} and in {tmp_path}"):
        ops_cuda._open_library("the driver", ["cuda"], [str(tmp_path)])


def test_a_library_that_does_not_load_is_named(monkeypatch, tmp_path):
    (tmp_path / "libcuda.so.1").write_bytes(b"not a library")
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(CUDAUnavailable, match=rf"could not load {tmp_path / 'libcuda.so.1'}"):
        ops_cuda._open_library("the driver", ["cuda"], [str(tmp_path)])


def test_cpu_stays_the_default_without_cuda_1():
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA", "DEV", "CPU", "PYTHON")}
    code = "from glassgrad import Device; print(Device.DEFAULT)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env | {"PYTHONPATH": REPO})
    assert done.stdout.strip() == "CPU", done.stderr


def test_cuda_1_makes_cuda_the_default():
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "CPU", "PYTHON")}
    code = "from glassgrad import Device; print(Device.DEFAULT)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env | {"PYTHONPATH": REPO, "CUDA": "1"})  # fmt: skip
    assert done.stdout.strip() == "CUDA", done.stderr


def test_without_a_gpu_opening_cuda_says_why():
    if MISSING is None:
        assert Device["CUDA"].name == "CUDA"
    else:
        assert MISSING.startswith("CUDA is unavailable: ")
        with pytest.raises(CUDAUnavailable, match="CUDA is unavailable"):
            Tensor([1.0], device="CUDA")


# ---- on a GPU ----


@needs_gpu
@pytest.mark.parametrize("nbytes", [1, 3, 4096, 1 << 20, (1 << 20) + 7])
def test_copy_round_trip(nbytes):
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    buf = Buffer("CUDA", nbytes, dtypes.uint8).copyin(data)
    assert bytes(buf.as_bytes()) == data
    other = Buffer("CUDA", nbytes, dtypes.uint8).copy_from(buf)  # device to device, no host in between
    assert bytes(other.as_bytes()) == data


@needs_gpu
def test_copy_between_gpus_when_there_are_two(monkeypatch):
    count = ops_cuda.init_driver()
    devices = ["CUDA"] + [f"CUDA:{i}" for i in range(1, count)]
    data = np.arange(1000, dtype=np.float32)
    t = Tensor(data, device=devices[-1]).realize()  # the last GPU (the first, where there is one)
    for device in devices:
        t = t.to(device) * 2 + 1  # straight from the other GPU's memory, then a kernel on this one
        with monkeypatch.context() as m:
            m.setattr(Buffer, "as_bytes", lambda self: pytest.fail("a copy between GPUs went through the host"))
            t.realize()
        assert t.device == device
        data = data * 2 + 1
    np.testing.assert_array_equal(t.to(devices[0]).numpy(), data)
    np.testing.assert_array_equal(t.to("CPU").numpy(), data)


@needs_gpu
def test_a_device_that_does_not_exist_says_how_many_there_are():
    count = ops_cuda.init_driver()
    with pytest.raises(CUDAError, match=rf"device CUDA:{count + 3} does not exist: the driver sees {count} CUDA"):
        Device[f"CUDA:{count + 3}"]


@needs_gpu
def test_launch_computes_an_elementwise_kernel_over_many_blocks():
    n = 10 * ops_cuda.BLOCK_SIZE + 7  # a partial last block: threads past the end must not write
    a, b = random_array((n,), seed=1), random_array((n,), seed=2)
    assert_matches(Tensor(a, device="CUDA") * Tensor(b, device="CUDA") + 1, a * b + 1)


def test_a_launch_passes_each_pointer_and_remakes_its_arguments_only_when_one_changes():
    """Without a GPU: the driver's launch function faked, what CUDAProgram hands it (its parameter array made again
    only for other arguments: an eager op's next launch gets the same allocations back)."""
    calls = []

    def launch(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared, stream, params, extra) -> int:
        pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        values = [ctypes.c_uint64.from_address(pointers[i]).value for i in range(3)]
        calls.append(((grid_x, grid_y, grid_z, block_x, block_y, block_z, shared, stream, extra), params, values))
        return 0

    program = object.__new__(ops_cuda.CUDAProgram)
    program.name, program.function, program.shared_bytes = "E_1000", ctypes.c_void_p(1), 0
    program._last_launch, program._launch, program._params, program._launch_kernel = None, (), (), launch
    program.device = type("NoGPU", (), {"activate": lambda self: None})()
    for handles in ((11, 22, 33), (11, 22, 33), (11, 44, 33)):
        assert program(*handles, global_size=(1000,), local_size=None) is None
    assert [values for _, _, values in calls] == [[11, 22, 33], [11, 22, 33], [11, 44, 33]]
    assert calls[0][0] == (4, 1, 1, ops_cuda.BLOCK_SIZE, 1, 1, 0, None, None)  # 1000 threads in blocks of 256
    assert calls[1][1] is calls[0][1] and calls[2][1] is not calls[0][1]
    program.device = None  # (its __del__ unloads nothing)


@needs_nvrtc
def test_nvrtc_minimal_gives_the_same_cubins_and_an_nvrtc_without_it_compiles_all_the_same(monkeypatch):
    """--minimal (NVRTC 12.4+) drops the runtime API's declarations, which no kernel uses: the same binary for an
    elementwise kernel, a block's shared reduction and a tensor-core (wgmma) product; an NVRTC that rejects the
    option compiles without it."""
    hopper = CUDARenderer()
    hopper.tile_configs = HOPPER_CONFIGS
    x, w = Tensor.empty(64, 3000, device="CPU"), Tensor.empty(512, 512, dtype=dtypes.float16, device="CPU")
    sources = [get_program(t.schedule()[-1].ast, hopper).src for t in ((x + 1).relu(), x.sum(axis=1))]
    sources.append(get_program((w @ w).relu().schedule()[-1].ast, hopper, (Opt("TC", 0, 0),)).src)  # wgmma's tiles
    compiler = ops_cuda.NVRTCCompiler("sm_90")
    assert "--minimal" in compiler.options  # (the NVRTC the tests install is 13.x)
    plain = ops_cuda.NVRTCCompiler("sm_90")
    plain.options = [o for o in plain.options if o != "--minimal"]
    assert "wgmma." in sources[2] and [compiler.compile(s) for s in sources] == [plain.compile(s) for s in sources]
    rejecting = ops_cuda.NVRTCCompiler("sm_90")
    monkeypatch.setattr(ops_cuda, "libnvrtc", lambda real=ops_cuda.libnvrtc(): _RejectsMinimal(real))
    assert rejecting.compile(sources[0]) == plain.compile(sources[0]) and "--minimal" not in rejecting.options


class _RejectsMinimal:
    """NVRTC as one older than 12.4 answers: NVRTC_ERROR_INVALID_OPTION for --minimal."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name: str):
        return getattr(self.real, name)

    def nvrtcCompileProgram(self, program, count, options):
        if b"--minimal" in [options[i] for i in range(count)]:
            return ops_cuda.NVRTC_ERROR_INVALID_OPTION
        return self.real.nvrtcCompileProgram(program, count, options)


@needs_gpu
def test_eager_ops_on_reused_and_new_allocations_each_compute_their_own_values():
    a = Tensor(np.arange(10, dtype=np.float32), device="CUDA").realize()
    kept = []
    for i in range(6):  # a result dropped gives its allocation to the next; a result kept makes the next one new
        out = (a + Tensor(np.full(10, i, np.float32), device="CUDA")).realize()  # (one kernel, launched each time)
        np.testing.assert_array_equal(out.numpy(), np.arange(10, dtype=np.float32) + i)
        if i % 2:
            kept.append((i, out))
    for i, out in kept:
        np.testing.assert_array_equal(out.numpy(), np.arange(10, dtype=np.float32) + i)


@needs_gpu
def test_program_timed_with_events_returns_seconds():
    x = Tensor(random_array((4096,)), device="CUDA").realize()
    (item,) = [i for i in (x * 2).schedule() if i.ast.op.name == "SINK"]
    from glassgrad.engine.realize import lower_item

    exec_item = lower_item(item)
    seconds = exec_item.runner([b.ensure_allocated() for b in exec_item.bufs], wait=True)
    assert 0 < seconds < 1


@needs_gpu
def test_driver_errors_carry_the_drivers_message():
    with pytest.raises(CUDAError, match=r"cuModuleLoadData failed: CUDA_ERROR_\w+ \(\d+\): .+"):
        ops_cuda.CUDAProgram(Device["CUDA"], "nothing", b"this is no cubin")
    with pytest.raises(CUDAError, match=r"cuMemcpyDtoH_v2 failed: CUDA_ERROR_INVALID_VALUE \(1\): invalid argument"):
        Device["CUDA"].allocator.copyout(memoryview(bytearray(4)), 0)  # no memory at address 0


@needs_gpu
def test_compile_errors_carry_nvrtc_log_and_source():
    with pytest.raises(CUDAError, match=r"(?s)nvrtc compiling a kernel failed: .*undefined.*--- source ---.*oops"):
        Device["CUDA"].compiler.compile('extern "C" __global__ void k() { oops(); }')


@needs_gpu
def test_to_and_back():
    data = random_array((3, 5))
    t = Tensor(data, device="CPU").to("cuda")
    assert t.device == "CUDA"
    np.testing.assert_array_equal((t + 0).to("CPU").numpy(), data)
    np.testing.assert_array_equal(t.T.to("PYTHON").numpy(), data.T)


@needs_gpu
@pytest.mark.parametrize("other", ["CPU", "PYTHON"])
def test_mixing_devices_names_both(other):
    with pytest.raises(ValueError, match=rf"mul: tensors are on different devices: CUDA and {other}"):
        Tensor([1.0], device="CUDA") * Tensor([1.0], device=other)
    with pytest.raises(ValueError, match=rf"add: tensors are on different devices: {other} and CUDA"):
        Tensor([1.0], device=other) + Tensor([1.0], device="CUDA")


SMALL_FLOATS = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16}


@needs_gpu
@pytest.mark.parametrize("dtype", SMALL_FLOATS)
def test_small_floats_compute_like_pytorch(dtype):
    a = torch.randn(37, 29, generator=torch.Generator().manual_seed(0)) * 10
    b = torch.randn(29, generator=torch.Generator().manual_seed(1))
    ta, tb = (Tensor(x.numpy(), device="CUDA").cast(dtype) for x in (a, b))
    ra, rb = a.to(SMALL_FLOATS[dtype]), b.to(SMALL_FLOATS[dtype])
    for ours, theirs in [(ta * tb + 1, ra * rb + 1), (ta.max(axis=1), ra.amax(1)), ((ta / 8).exp(), (ra / 8).exp()),
                         (ta.cast(dtypes.float32), ra.float()), (ta.sqrt(), ra.sqrt())]:  # fmt: skip
        got = torch.from_numpy(ours.cast(dtypes.float32).numpy())
        torch.testing.assert_close(got, theirs.float(), equal_nan=True, rtol=1e-2, atol=1e-2)


@needs_gpu
@pytest.mark.parametrize("src", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.int32,
                                 dtypes.int64, dtypes.bool])  # fmt: skip
@pytest.mark.parametrize("dst", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.int32, dtypes.bool])
def test_casts_match_the_cpu(src, dst):
    values = np.array([0.0, -0.0, 1.0, -2.5, 3.75, 100.0, 1e-3, 65504.0, -7.0, 0.5], dtype=np.float64)
    if src == dtypes.bool:
        values = values != 0
    x = Tensor(values, device="CPU").cast(src).realize()
    expected = x.cast(dst).numpy()
    np.testing.assert_array_equal(x.to("CUDA").cast(dst).numpy(), expected)  # bfloat16 arrives as float32


@needs_gpu
def test_half_nan_inf_and_bitcast():
    x = Tensor(np.array([np.nan, np.inf, -np.inf, 1.0], dtype=np.float32), device="CUDA")
    h = x.cast(dtypes.float16)
    np.testing.assert_array_equal(h.isnan().numpy(), [True, False, False, False])
    np.testing.assert_array_equal(h.isinf().numpy(), [False, True, True, False])
    np.testing.assert_array_equal(
        h[1:].bitcast(dtypes.int16).numpy(), np.array([np.inf, -np.inf, 1.0], np.float16).view(np.int16)
    )
    np.testing.assert_array_equal(
        x.bitcast(dtypes.uint32).numpy()[1:], np.array([np.inf, -np.inf, 1.0], np.float32).view(np.uint32)
    )


REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean}


@needs_gpu
@pytest.mark.parametrize("shape", [(1,), (255,), (256,), (257,), (100_003,), (3, 1000), (700, 129), (40, 2, 333)])
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_shared_by_a_block_match_numpy(shape, name):
    low, high = (0.9, 1.1) if name == "prod" else (-3, 3)
    data = random_array(shape, low=low, high=high, seed=len(shape))
    t = Tensor(data, device="CUDA")
    for axis in (None, -1):
        # float32 sums of 100k terms round differently in any other order: allow for it
        assert_matches(getattr(t, name)(axis=axis), REDUCTIONS[name](data, axis=axis), rtol=1e-4, atol=1e-3)


@needs_gpu
def test_shared_reductions_of_ints_bools_nan_and_several_accumulators():
    ints = random_array((5, 4000), dtypes.int32, -1000, 1000)
    assert_matches(Tensor(ints, device="CUDA").sum(axis=1), ints.sum(axis=1), dtypes.int32)
    flags = np.zeros((3, 5000), bool)
    flags[1, 4321] = True
    assert_matches(Tensor(flags, device="CUDA").max(axis=1), flags.max(axis=1))
    with_nan = random_array((4, 3000), seed=5)
    with_nan[2, 2999] = np.nan
    assert_matches(Tensor(with_nan, device="CUDA").max(axis=1), with_nan.max(axis=1))
    a, b = random_array((4, 3000), seed=6), random_array((3000, 3), seed=7)
    assert_matches(Tensor(a, device="CUDA") @ Tensor(b, device="CUDA"), a @ b, rtol=1e-4, atol=1e-4)
    x = random_array((6, 5000), dtypes.float64, seed=8)
    t = Tensor(x, device="CUDA")
    assert_matches((t - t.mean(axis=1, keepdim=True)).square().mean(axis=1), x.var(axis=1), rtol=1e-9)


# ---- TinyJit replays through a CUDA graph ----


def _jit_runs(fn, inputs: list[tuple[np.ndarray, ...]], graph: bool) -> tuple[list[np.ndarray], TinyJit, int]:
    """fn under TinyJit on each input set, with or without graphs: the outputs, the jit, the graph launches."""
    from glassgrad import Context
    from glassgrad.engine.cuda_graph import CUDAGraph

    jitted, launches = TinyJit(fn), CUDAGraph.launches
    with Context(JIT_GRAPH=int(graph)):
        outs = [jitted(*(Tensor(a, device="CUDA") for a in arrays)).numpy() for arrays in inputs]
    return outs, jitted, CUDAGraph.launches - launches


def _several_kernels(a: Tensor, b: Tensor) -> Tensor:
    h = (a @ b).relu() + a.sum(axis=1, keepdim=True)  # a matmul, a reduction through shared memory, elementwise
    return (h - h.max(axis=1, keepdim=True)).exp().sum(axis=0) * 0.5


@needs_gpu
def test_jit_replays_through_a_graph_bit_for_bit_and_honours_each_calls_inputs():
    inputs = [(random_array((33, 300), seed=s), random_array((300, 7), seed=s + 100)) for s in range(6)]
    with_graph, jitted, launches = _jit_runs(_several_kernels, inputs, graph=True)
    without, plain, plain_launches = _jit_runs(_several_kernels, inputs, graph=False)
    assert launches == 4 and plain_launches == 0  # calls 3 to 6 replay; JIT_GRAPH=0 replays kernel by kernel
    assert jitted.graph and plain.graph is None and len(jitted.graph.items) == len(jitted.items) > 2
    for step, (g, p, (a, b)) in enumerate(zip(with_graph, without, inputs)):
        assert np.array_equal(g.view(np.uint32), p.view(np.uint32)), f"call {step + 1}"
        expected = np.maximum(a @ b, 0) + a.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(g, (np.exp(expected - expected.max(axis=1, keepdims=True)).sum(0) * 0.5), 1e-4)


@needs_gpu
def test_a_graph_updates_its_nodes_for_new_inputs_rather_than_being_built_again():
    jitted = TinyJit(lambda a, b: (a * b + a).sum(axis=0))
    sets = [(random_array((50, 9), seed=s), random_array((50, 9), seed=s + 50)) for s in range(3)]
    tensors = [tuple(Tensor(x, device="CUDA").realize() for x in pair) for pair in sets]
    order = [0, 1, 2, 1, 0, 2, 2]  # the same buffers again, and others in between
    graphs = []
    for n in order:
        out = jitted(*tensors[n]).numpy()
        a, b = sets[n]
        np.testing.assert_allclose(out, (a * b + a).sum(axis=0), rtol=1e-5, atol=1e-5)
        graphs.append(jitted.graph)
    assert graphs[2] and all(g is graphs[2] for g in graphs[2:])


@needs_gpu
def test_a_jitted_training_step_trains_the_same_with_and_without_graphs():
    from glassgrad.nn.optim import Adam

    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((12, 16)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)
    batches = [(rng.standard_normal((20, 12)).astype(np.float32), rng.standard_normal((20, 3)).astype(np.float32))
               for _ in range(8)]  # fmt: skip

    def train(graph: bool) -> tuple[list[np.ndarray], list[np.ndarray], int]:
        params = [Tensor(w, device="CUDA", requires_grad=True) for w in (w1, w2)]
        optimizer = Adam(params, lr=0.01)

        def step(x: Tensor, y: Tensor) -> Tensor:
            with Tensor.train():
                optimizer.zero_grad()
                loss = ((x @ params[0]).relu() @ params[1] - y).square().mean().backward()
                optimizer.step()
                return loss

        losses, jitted, launches = _jit_runs(step, batches, graph)
        return losses, [p.numpy() for p in params], launches

    graph_losses, graph_params, launches = train(graph=True)
    plain_losses, plain_params, _ = train(graph=False)
    assert launches == len(batches) - 2
    assert [x.tobytes() for x in graph_losses] == [x.tobytes() for x in plain_losses]
    assert all(np.array_equal(g, p) for g, p in zip(graph_params, plain_params))
    assert graph_losses[-1] < graph_losses[0]


@needs_gpu
def test_a_graph_holds_copies_within_the_gpu_and_updates_them():
    from glassgrad.engine.cuda_graph import graph_for
    from glassgrad.engine.realize import CopyRunner, ExecItem

    data = [random_array((1000,), seed=s) for s in range(3)]
    src = [Buffer("CUDA", 1000, dtypes.float32).copyin(d.tobytes()) for d in data]
    dst = Buffer("CUDA", 1000, dtypes.float32)
    items = [ExecItem(CopyRunner(), [dst, src[0]])]
    graph = graph_for(items, [items[0].bufs])
    for n in (0, 1, 2, 0):
        graph([[dst, src[n]]])
        assert np.array_equal(np.frombuffer(dst.as_bytes(), np.float32), data[n])


@needs_gpu
def test_work_off_the_gpu_replays_item_by_item():
    jitted = TinyJit(lambda a: (a.to("CUDA") * 2).realize())  # a copy from the CPU: no graph
    for s in range(4):
        x = random_array((5, 5), seed=s)
        np.testing.assert_array_equal(jitted(Tensor(x, device="CPU")).numpy(), x * 2)
    assert jitted.graph is False


def _round_trip_in_the_middle(a: Tensor, b: Tensor) -> Tensor:
    h = (a @ b).relu().sum(axis=1, keepdim=True) + a  # kernels on the GPU
    back = h.to("CPU").to("CUDA")  # copies through the host: they run by themselves, between graphs
    return ((back @ b).exp().sum(axis=0) * 0.5).realize()


@needs_gpu
def test_a_replay_with_work_off_the_gpu_in_the_middle_graphs_the_stretches_around_it():
    from glassgrad.engine.cuda_graph import GraphRuns

    inputs = [(random_array((9, 30), seed=s), random_array((30, 30), seed=s + 9) * 0.1) for s in range(5)]
    with_graph, jitted, launches = _jit_runs(_round_trip_in_the_middle, inputs, graph=True)
    without, plain, _ = _jit_runs(_round_trip_in_the_middle, inputs, graph=False)
    assert isinstance(jitted.graph, GraphRuns)
    graphs = [g for _, _, g in jitted.graph.stretches if g is not None]
    assert len(graphs) >= 1 and launches == 3 * len(graphs)  # calls 3 to 5 replay, each stretch a launch
    for g, p, (a, b) in zip(with_graph, without, inputs):
        assert np.array_equal(g.view(np.uint32), p.view(np.uint32))
        h = np.maximum(a @ b, 0).sum(axis=1, keepdims=True) + a
        np.testing.assert_allclose(g, np.exp(h @ b).sum(axis=0) * 0.5, rtol=1e-4)


# ---- large elementwise kernels: several indices a thread ----


def test_a_large_loop_free_kernel_gives_each_thread_several_indices():
    from glassgrad.renderer.cuda import ITEMS_FROM, THREAD_ITEMS

    x = Tensor(np.ones(ITEMS_FROM + 3, np.float32), device="CPU").realize()
    (spec,) = _kernels(x * 2 + 1)
    assert spec.global_size == (-(-(ITEMS_FROM + 3) // THREAD_ITEMS),) and spec.local_size is None
    assert f"for (int gitem = 0; gitem < {THREAD_ITEMS}; gitem++) {{" in spec.src
    assert f"int gidx = (blockIdx.x*{THREAD_ITEMS}+gitem)*blockDim.x+threadIdx.x;" in spec.src
    (small,) = _kernels(x[:1000] * 2)
    assert small.global_size == (1000,) and "gitem" not in small.src
    (rows,) = _kernels(x[: 1 << 20].reshape(1 << 14, 64).sum(axis=1))  # a loop of its own: one index a thread
    assert rows.global_size == (1 << 14,) and "gitem" not in rows.src


@needs_gpu
@pytest.mark.parametrize("shape", [(1 << 20,), ((1 << 20) + 5,), (1025, 1031)])
def test_several_indices_a_thread_write_every_element(shape):
    a, b = random_array(shape, seed=1), random_array(shape, seed=2)
    ta, tb = Tensor(a, device="CUDA"), Tensor(b, device="CUDA")
    assert_matches(((ta + tb) * ta - tb) * 0.5 + 1, ((a + b) * a - b) * 0.5 + 1)
    assert_matches(ta.T * 3 if len(shape) == 2 else ta.flip(0) * 3, (a.T if len(shape) == 2 else a[::-1]) * 3)
