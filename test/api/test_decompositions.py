"""qr and svd (mixin/decompositions.py) against torch.linalg: values, and gradients where PyTorch defines them."""

import numpy as np
import pytest
import torch

import glassgrad.mixin.decompositions as decompositions
from glassgrad import Tensor
from glassgrad.uop.ops import UOp
from torch_check import check_op, weighted

QR_SHAPES = [(1, 1), (3, 3), (5, 3), (3, 5), (2, 4, 3), (0, 3), (3, 0), (2, 1, 1)]


def joined(*parts):
    """Several results as one flat tensor, so that check_op compares them all (and their weighted gradients)."""
    return parts[0].flatten().cat(*(p.flatten() for p in parts[1:])) if isinstance(parts[0], Tensor) else \
        torch.cat([p.flatten() for p in parts])  # fmt: skip


@pytest.mark.parametrize("shape", QR_SHAPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_qr_matches_torch(shape, layout):
    # torch differentiates QR only where R's rows cover the columns (m >= n) in reduced mode
    grad = shape[-2] >= shape[-1] and 0 not in shape
    check_op([shape], weighted(lambda x: joined(*torch.linalg.qr(x))), weighted(lambda x: joined(*x.qr())),
             layout=layout, grad=grad, atol=1e-5, grad_atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (5, 3), (3, 5), (2, 4, 3)])
def test_complete_qr_matches_torch(shape):
    check_op([shape], lambda x: joined(*torch.linalg.qr(x, mode="complete")), lambda x: joined(*x.qr(some=False)),
             grad=False, atol=1e-5)  # fmt: skip


def test_qr_of_columns_already_zero_below_the_diagonal_as_lapack():
    a = np.array([[2.0, 1.0, 0.0], [0.0, -3.0, 1.0], [0.0, 0.0, -4.0]], np.float32)  # upper triangular: no reflection
    q, r = Tensor(a).qr()
    tq, tr = torch.linalg.qr(torch.tensor(a))
    np.testing.assert_allclose(q.numpy(), tq.numpy(), atol=1e-6)
    np.testing.assert_allclose(r.numpy(), tr.numpy(), atol=1e-6)


def test_qr_refuses_a_vector_as_torch():
    with pytest.raises(RuntimeError):
        torch.linalg.qr(torch.ones(3))
    with pytest.raises(RuntimeError, match=r"qr: expects a matrix or a batch of them \(at least 2 dims\)"):
        Tensor.ones(3).qr()


SVD_SHAPES = [(1, 1), (2, 2), (4, 4), (5, 3), (3, 5), (2, 4, 3), (3, 2, 5), (6, 5)]


@pytest.mark.parametrize("shape", SVD_SHAPES)
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_matches_torch(shape, full_matrices):
    a = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    u, s, vh = Tensor(a).svd(full_matrices)
    tu, ts, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=full_matrices)
    assert (u.shape, s.shape, vh.shape) == (tuple(tu.shape), tuple(ts.shape), tuple(tvh.shape))
    np.testing.assert_allclose(s.numpy(), ts.numpy(), atol=1e-5, rtol=1e-5)
    # singular vectors are unique up to sign: compare them with the signs lined up, and the product exactly
    un, vn = u.numpy(), vh.numpy()
    k = s.shape[-1]
    signs = np.sign(np.sum(un[..., :, :k] * tu.numpy()[..., :, :k], axis=-2, keepdims=True))
    np.testing.assert_allclose(un[..., :, :k] * signs, tu.numpy()[..., :, :k], atol=1e-4)
    np.testing.assert_allclose(vn[..., :k, :] * np.swapaxes(signs, -1, -2), tvh.numpy()[..., :k, :], atol=1e-4)
    np.testing.assert_allclose((un[..., :, :k] * s.numpy()[..., None, :]) @ vn[..., :k, :], a, atol=1e-5)
    eye = np.eye(un.shape[-1], dtype=np.float32)
    np.testing.assert_allclose(np.swapaxes(un, -1, -2) @ un, np.broadcast_to(eye, un.shape[:-2] + eye.shape), atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_svd_gradients_match_torch(shape, layout):
    """Gradients of functions that do not depend on the singular vectors' signs: S, and U @ Vh (the polar factor)."""

    def sign_free(x):
        u, s, vh = torch.linalg.svd(x, full_matrices=False) if isinstance(x, torch.Tensor) else x.svd(False)
        return joined(s, u @ vh)

    check_op([shape], weighted(sign_free), layout=layout, atol=1e-5, grad_atol=1e-4)


def test_svd_of_a_rank_deficient_matrix_keeps_zero_singular_values():
    a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0]).astype(np.float32)
    _, s, _ = Tensor(a).svd()
    np.testing.assert_allclose(s.numpy(), torch.linalg.svd(torch.tensor(a)).S.numpy(), atol=1e-5)


def _walked_nodes(sweeps: int, monkeypatch) -> int:
    """How many graph nodes the walks over the graph visit while an svd is realized."""
    monkeypatch.setattr(decompositions, "JACOBI_SWEEPS", sweeps)
    x = Tensor(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))
    x.softmax(0).realize()  # something realized before: later graphs must be brought up to date over it
    _, s, _ = x.svd(False)
    visited, walk = [0], UOp.toposort

    def counted(node, enter=None):
        out = walk(node, enter)
        visited[0] += len(out)
        return out

    monkeypatch.setattr(UOp, "toposort", counted)
    s.realize()
    monkeypatch.setattr(UOp, "toposort", walk)
    return visited[0]


def test_realizing_a_long_lazy_graph_walks_it_a_bounded_number_of_times(monkeypatch):
    """live.current brings a graph up to date over nodes realized since: each node once per walk. A walk per
    replaced node made realizing svd's graph (hundreds of kernels) quadratic: 1.5 minutes for a 5x4 matrix. Each
    sweep adds the same nodes, so each must add the same walking."""
    _walked_nodes(3, monkeypatch)  # compiles the kernels (compiling walks each kernel's graph) before counting
    one, two, three = (_walked_nodes(sweeps, monkeypatch) for sweeps in (1, 2, 3))
    assert three - two < 1.15 * (two - one), f"walked {one}, {two}, {three} nodes for 1, 2, 3 sweeps: not linear"
