"""The CHUNK action (a reduced axis summed a chunk at a time, each chunk adding into the output) keeps every
contraction's values: matmuls with either operand transposed, a batched one, convolutions forward and both gradients,
odd and 1-size axes, 1 thread and several, the CPU and the PYTHON reference; it is refused where it cannot apply; the
CPU heuristics choose it where a contraction's operands outgrow the renderer's cache and not for a small one."""

import numpy as np
import pytest
import torch

from glassgrad import Device, Tensor
from glassgrad.codegen import get_program, kernel_name
from glassgrad.codegen.heuristics import hand_coded_opts
from glassgrad.codegen.opt import Opt, chunkable, main_reduce
from glassgrad.codegen.search import actions, valid
from glassgrad.engine.realize import buffer_of, run_schedule
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.uop import Ops
from test_opt_actions import run as run_with_opts

pytestmark = pytest.mark.usefixtures("on_the_cpu")  # the CPU's own actions, whatever the default device

rng = np.random.default_rng(1)


def conv(x, w, stride=1, padding=1):
    return torch.nn.functional.conv2d(x, w, stride=stride, padding=padding)


def conv_weight_grad(x, w, dy):
    """dL/dw of conv(x, w) for the upstream gradient dy (torch's autograd, or ours)."""
    if isinstance(x, torch.Tensor):
        x, w, dy = x.clone(), w.clone().requires_grad_(), dy.clone()
        conv(x, w, stride=2).backward(dy)
        return w.grad
    w = w.detach().requires_grad_()
    x.conv2d(w, stride=2, padding=1).backward(dy)
    return w.grad


def conv_input_grad(x, w, dy):
    if isinstance(x, torch.Tensor):
        x, dy = x.clone().requires_grad_(), dy.clone()
        conv(x, w).backward(dy)
        return x.grad
    x = x.detach().requires_grad_()
    x.conv2d(w, padding=1).backward(dy)
    return x.grad


# (input shapes, the function of torch tensors or of glassgrad's): each a contraction whose last kernel sums products
CONTRACTIONS = {
    "a_T_b_odd": ([(45, 7), (45, 13)], lambda a, b: a.T @ b),  # a weight gradient: the sum over the outer axis
    "a_b_T": ([(9, 30), (11, 30)], lambda a, b: a @ b.T),
    "a_b_one_column": ([(6, 24), (24, 1)], lambda a, b: a @ b),
    "batched": ([(3, 5, 36), (3, 36, 4)], lambda a, b: a @ b),
    "conv_forward": (
        [(2, 16, 7, 7), (5, 16, 3, 3)],
        lambda x, w: conv(x, w) if isinstance(x, torch.Tensor) else x.conv2d(w, padding=1),
    ),  # fmt: skip
    "conv_weight_grad": ([(16, 3, 9, 9), (6, 3, 3, 3), (16, 6, 5, 5)], conv_weight_grad),
    "conv_input_grad": ([(2, 4, 6, 6), (16, 4, 3, 3), (2, 16, 6, 6)], conv_input_grad),
    # a tied weight's gradient: a product summed over images and tokens, plus the other use's gradient, in one kernel
    "sum_plus_a_term": (
        [(3, 32, 24), (3, 32, 16), (24, 16)],
        lambda x, dy, g: (x.unsqueeze(-1) * dy.unsqueeze(-2)).sum((0, 1)) + g,
    ),
}


def contraction(name, device="CPU"):
    """The last kernel of the contraction (inputs computed), the arrays it was given and torch's result."""
    shapes, fn = CONTRACTIONS[name]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = fn(*[torch.from_numpy(a) for a in arrays]).numpy()
    *before, item = fn(*[Tensor(a, device=device) for a in arrays]).schedule()
    run_schedule(before)
    return item, expected


def run(item, opts, threads=1, device="CPU") -> np.ndarray:
    """The kernel compiled with exactly these opts and run, its output buffer filled with NaN first (a chunk that read
    what no chunk had written would show)."""
    out = buffer_of(item.bufs[0]).ensure_allocated()
    out.copyin(np.full(out.size, np.nan, np.float32).tobytes())
    return run_with_opts(item, opts, threads, device)


def chunks(item) -> list[Opt]:
    """Every CHUNK the search offers this kernel, and that it accepts alone."""
    return [a for a in actions(item.ast) if a.op == "CHUNK" and valid(item.ast, (a,))]


def close(got, expected, opts):
    """Equal up to float32 rounding of sums taken in another order (relative to the largest value)."""
    atol = 1e-5 * max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=atol, err_msg=str(opts))


@pytest.mark.parametrize("name", sorted(CONTRACTIONS))
def test_each_chunk_alone_keeps_the_values_with_one_thread_and_three(name):
    item, expected = contraction(name)
    found = chunks(item)
    assert found, "no chunk applies"
    for opts in found:
        one = run(item, (opts,))
        close(one, expected, opts)
        assert np.array_equal(one, run(item, (opts,), threads=3)), f"threads change {opts}"


@pytest.mark.parametrize("name", sorted(CONTRACTIONS))
def test_chunk_with_the_heuristics_register_block_and_unrolls_keeps_the_values(name):
    item, expected = contraction(name)
    base = tuple(hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes))
    combos = [base + (c,) for c in chunks(item) if valid(item.ast, base + (c,))]
    combos += [(c, a) for c in chunks(item)[:2] for a in actions(item.ast) if a.op == "UNROLL"
               and valid(item.ast, (c, a))]  # fmt: skip
    assert combos
    for opts in combos:
        close(run(item, opts, threads=2), expected, opts)


@pytest.mark.parametrize("name", ["a_T_b_odd", "conv_weight_grad"])
def test_chunk_on_the_python_device(name):
    item, expected = contraction(name, device="PYTHON")
    for opts in chunks(item)[:2]:
        close(run(item, (opts,), device="PYTHON"), expected, opts)


def test_a_chunk_of_the_whole_axis_is_the_plain_kernel():
    item, expected = contraction("a_T_b_odd")
    reduced = main_reduce(item.ast).arg[1][0]
    assert not valid(item.ast, (Opt("CHUNK", reduced, 45),))
    close(run(item, (Opt("CHUNK", reduced, 45),)), expected, "CHUNK of all 45")


def test_chunk_names_its_loop_and_reads_back_what_earlier_chunks_stored():
    item, _ = contraction("a_T_b_odd")
    reduced = main_reduce(item.ast).arg[1][0]
    spec = get_program(item.ast, Device["CPU"].renderer, (Opt("CHUNK", reduced, 9),))
    assert kernel_name(item.ast, (Opt("CHUNK", reduced, 9),)) == "r_5_7_13_9"  # 5 chunks of 9 terms
    assert "(0<ridx1)" in spec.src  # the chunks after the first add to the output


def test_chunk_that_cannot_apply_is_refused():
    item, _ = contraction("a_T_b_odd")
    reduced = main_reduce(item.ast).arg[1][0]
    renderer = Device["CPU"].renderer
    for bad, why in [(Opt("CHUNK", reduced, 4), "does not divide"), (Opt("CHUNK", 0, 3), "not a reduced axis")]:
        assert not valid(item.ast, (bad,))
        with pytest.raises(ValueError, match=why):
            get_program(item.ast, renderer, (bad,))
    assert not valid(item.ast, (Opt("CHUNK", reduced, 9), Opt("UNROLL", reduced, 5)))  # 5 does not divide a chunk
    assert not valid(item.ast, (Opt("CHUNK", reduced, 9),), has_local=True)
    with pytest.raises(ValueError, match="GPU"):
        get_program(item.ast, CUDARenderer(), (Opt("CHUNK", reduced, 9),))


def test_chunk_is_refused_where_the_sum_is_not_stored_as_it_is():
    a, b = (
        Tensor(rng.standard_normal((20, 6)).astype(np.float32)),
        Tensor(rng.standard_normal((20, 5)).astype(np.float32)),
    )
    *before, item = (a.T @ b).relu().schedule()
    run_schedule(before)
    reduced = main_reduce(item.ast).arg[1][0]
    assert not any(o.op == "CHUNK" for o in actions(item.ast))
    assert not valid(item.ast, (Opt("CHUNK", reduced, 4),))
    with pytest.raises(ValueError, match="stores a sum as it is"):
        get_program(item.ast, Device["CPU"].renderer, (Opt("CHUNK", reduced, 4),))


def test_chunk_needs_an_output_loop_for_the_threads():
    item, expected = contraction("a_b_one_column")
    reduced = main_reduce(item.ast).arg[1][0]
    assert not valid(item.ast, (Opt("UPCAST", 0, 6), Opt("CHUNK", reduced, 8)))
    with pytest.raises(ValueError, match="no output loop"):
        get_program(item.ast, Device["CPU"].renderer, (Opt("UPCAST", 0, 6), Opt("CHUNK", reduced, 8)))


# ---- the heuristics ----


def weight_gradient(tokens, features, outputs):
    x = Tensor(rng.standard_normal((tokens, features)).astype(np.float32))
    dy = Tensor(rng.standard_normal((tokens, outputs)).astype(np.float32))
    return (x.T @ dy).schedule()[-1]


# (tokens, features, outputs of X.T @ dY, the cache declared, the chunk chosen or None): per iteration of the loop
# threads split, chunks cost their output read and written again (from memory, for what of it outgrows the cache),
# and save the operands the register blocks inside re-read from memory and the TLB misses of sweeps over X's rows
# (on one core, measured: the chunk chosen is the fastest of 64, 128 and 256 terms and none, or within 5% of it)
WEIGHT_GRADIENTS = [
    (1024, 1536, 384, 1 << 20, 64),  # rows 6 KB apart: 18.2 ms whole, 11.4 in chunks of 64
    (1024, 8192, 384, 1 << 20, 128),  # GPT-2's vocabulary gradient, rows 32 KB apart: 103 ms whole, 62 in chunks
    (1024, 384, 8192, 1 << 20, 128),  # rows 1.5 KB apart, 128 terms' pages fit the TLB: 64 ms whole, 44 in chunks
    (128, 2048, 2048, 1 << 20, 64),  # a row block's output (64 KB) stays in cache: 17.0 ms whole, 13.3 in 2 chunks
    (128, 4096, 4096, 1 << 20, None),  # 32 MB of output a tile, read and written again from memory: 2 chunks 94 ms,
    # whole 82-87
    (512, 320, 64, 96 << 10, 256),  # the TLB's pages hold 256 rows 1280 bytes apart
    (1024, 1536, 384, 64 << 20, 64),  # everything fits a 64 MB cache, but a sweep over 1024 rows misses the TLB
    (1024, 1536, 384, 0, None),  # a renderer with no cache to block for
]


@pytest.mark.parametrize("tokens,features,outputs,cache,chunk", WEIGHT_GRADIENTS)
def test_heuristics_chunk_a_weight_gradient_where_its_bytes_say_so(tokens, features, outputs, cache, chunk):
    item = weight_gradient(tokens, features, outputs)
    opts = hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes, cache_bytes=cache)
    expected = [] if chunk is None else [Opt("CHUNK", main_reduce(item.ast).arg[1][0], chunk)]
    assert [o for o in opts if o.op == "CHUNK"] == expected, opts


def test_a_load_that_stays_put_along_the_sum_takes_no_room_in_a_chunk():
    """A bias added to dY inside the weight gradient's kernel is read once for all terms: it takes no room in a chunk,
    whose length is the one without it."""
    x = Tensor(rng.standard_normal((512, 320)).astype(np.float32))
    dy = Tensor(rng.standard_normal((512, 64)).astype(np.float32))
    bias = Tensor(rng.standard_normal(64).astype(np.float32)).realize()
    item = (x.T @ (dy.realize() + bias)).schedule()[-1]
    loads = [n for n in item.ast.toposort() if n.op is Ops.LOAD]
    assert len(loads) == 3  # x, dy and the bias, in the one kernel
    opts = hand_coded_opts(item.ast, Device["CPU"].renderer.vector_lanes, cache_bytes=96 << 10)
    without = hand_coded_opts(
        weight_gradient(512, 320, 64).ast, Device["CPU"].renderer.vector_lanes, cache_bytes=96 << 10
    )
    assert [o for o in opts if o.op == "CHUNK"] == [o for o in without if o.op == "CHUNK"] != []


def test_heuristics_leave_a_small_contraction_a_forward_matmul_and_a_row_sum_unchunked():
    lanes = Device["CPU"].renderer.vector_lanes
    small = weight_gradient(32, 320, 16)
    assert not any(o.op == "CHUNK" for o in hand_coded_opts(small.ast, lanes, cache_bytes=64 << 10))
    a = Tensor(rng.standard_normal((256, 512)).astype(np.float32))
    forward = (a @ Tensor(rng.standard_normal((512, 64)).astype(np.float32))).schedule()[-1]
    assert not any(o.op == "CHUNK" for o in hand_coded_opts(forward.ast, lanes, cache_bytes=64 << 10))  # A's rows
    row_sum = Tensor(rng.standard_normal((64, 4096)).astype(np.float32)).sum(axis=1).schedule()[-1]
    assert not any(o.op == "CHUNK" for o in hand_coded_opts(row_sum.ast, lanes, cache_bytes=64 << 10))  # no reuse


def test_the_cpu_renderer_declares_a_cache():
    assert Device["CPU"].renderer.cache_bytes >= 64 << 10 and CUDARenderer.cache_bytes == 0


def test_heuristic_chunks_keep_forward_and_backward_values(monkeypatch):
    """With a small cache declared, the heuristics chunk the weight gradients; each kernel compiled as they choose."""
    monkeypatch.setattr(Device["CPU"].renderer, "cache_bytes", 96 << 10)
    x_np, w_np = rng.standard_normal((512, 320)).astype(np.float32), rng.standard_normal((320, 64)).astype(np.float32)
    x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
    (x @ w).square().sum().backward()
    tx, tw = torch.from_numpy(x_np).requires_grad_(), torch.from_numpy(w_np).requires_grad_()
    (tx @ tw).square().sum().backward()
    *before, item = w.grad.schedule()
    run_schedule(before)
    spec = get_program(item.ast, Device["CPU"].renderer)
    assert any(o.op == "CHUNK" for o in spec.opts)
    close(run(item, spec.opts, threads=2), tw.grad.numpy(), spec.opts)


def test_chunk_is_refused_where_the_kernel_reads_the_buffer_it_stores_into():
    """A sum stored into a buffer it reads (an assign in place, a.T @ b into a): later chunks would read what earlier
    ones stored. The kernel of a.T @ b with its store pointed at a's buffer takes no CHUNK."""
    item, _ = contraction("a_T_b_odd")
    store = item.ast.src[0]
    read = next(n.src[0] for n in item.ast.toposort() if n.op is Ops.LOAD)
    in_place = item.ast.substitute({store: store.replace(src=(read, *store.src[1:]))})
    reduced = main_reduce(in_place).arg[1][0]
    assert chunkable(item.ast) and not chunkable(in_place)
    assert not any(o.op == "CHUNK" for o in actions(in_place)) and not valid(in_place, (Opt("CHUNK", reduced, 9),))
    with pytest.raises(ValueError, match="stores a sum as it is"):
        get_program(in_place, Device["CPU"].renderer, (Opt("CHUNK", reduced, 9),))


def test_a_term_that_holds_the_sum_is_not_added_once():
    """sum + 2 * sum: the term added to the sum reads the sum itself; chunks cannot add it once: no CHUNK."""
    x, dy = (
        Tensor(rng.standard_normal((64, 24)).astype(np.float32)),
        Tensor(rng.standard_normal((64, 16)).astype(np.float32)),
    )
    product = (x.unsqueeze(-1) * dy.unsqueeze(-2)).sum(0)
    item = (product + product * 2).schedule()[-1]
    assert main_reduce(item.ast) is not None and not chunkable(item.ast)
    assert not any(o.op == "CHUNK" for o in actions(item.ast))
