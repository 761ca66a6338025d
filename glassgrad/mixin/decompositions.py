"""Tensor methods for matrix decompositions: qr (Householder reflections) and svd (one-sided Jacobi rotations).

Both are a fixed sequence of Tensor ops on the last two dims (any batch in front), so they stay lazy and their
gradients come from the derivative table: differentiating the steps gives PyTorch's analytic gradients where those
are defined (distinct singular values, full rank). Each step is made contiguous, forward and backward (_step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glassgrad.gradient import custom_gradient

if TYPE_CHECKING:
    from glassgrad.tensor import Tensor

JACOBI_SWEEPS = 10  # each sweep rotates every pair of columns once; float32 converges in 5 or 6


class DecompositionsMixin:
    """qr and svd."""

    def qr(self: Tensor, some: bool = True) -> tuple[Tensor, Tensor]:
        """(Q, R), Q orthonormal, R upper triangular, Q @ R = self, as torch.linalg.qr; some=False: complete Q."""
        # reduced: Q (..., m, k), R (..., k, n), k = min(m, n); complete (tinygrad's qr()): Q (..., m, m), R (..., m, n)
        a = _matrices(self, "qr")
        q, r = _householder(a)
        if some:
            k = min(a.shape[-2:])
            q, r = q[..., :, :k], r[..., :k, :]
        return q, r

    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """(U, S, Vh) with U @ diag(S) @ Vh = self and S descending, as torch.linalg.svd and tinygrad's svd."""
        # each singular vector's sign is arbitrary, as in any SVD; full_matrices=False: U (..., m, k), Vh (..., k, n)
        a = _matrices(self, "svd")
        m, n = a.shape[-2:]
        if m < n:  # A = (A^T)^T: the left and right vectors swap
            v, s, uh = a.transpose(-1, -2).svd(full_matrices)
            return uh.transpose(-1, -2), s, v.transpose(-1, -2)
        q, r = _householder(a)  # A = Q R: the SVD of the small square R gives A's
        u_r, s, v = _jacobi_svd(r[..., :n, :])
        if full_matrices:  # U = Q @ [[U_r, 0], [0, I]]
            eye = type(a).eye(m, device=a.device, dtype=a.dtype)
            past_n = (type(a).arange(m, device=a.device) >= n).reshape(m, 1)
            u = q @ (u_r.pad((*((0, 0),) * (u_r.ndim - 2), (0, m - n), (0, m - n))) + past_n.where(eye, 0))
        else:
            u = q[..., :, :n] @ u_r
        return u, s, v.transpose(-1, -2)


def _step(x: Tensor) -> Tensor:
    """x in a buffer of its own, and its gradient too: the backward pass reads each step's gradient several times,
    and a fused chain of them would recompute every later step's (as tinygrad's contiguous().contiguous_backward())."""
    return custom_gradient(x.contiguous(), (x,), lambda g, x: (g.contiguous(),))


def _matrices(x: Tensor, op: str) -> Tensor:
    """x as a float batch of matrices."""
    if x.ndim < 2:
        raise RuntimeError(f"{op}: expects a matrix or a batch of them (at least 2 dims), got shape {x.shape}")
    return x._float_input()


def _householder(a: Tensor) -> tuple[Tensor, Tensor]:
    """The complete Q (..., m, m) and R (..., m, n): R = H_k .. H_1 A, Q = H_1 .. H_k, where H_i = I - tau v v^T
    zeroes column i below the diagonal. As LAPACK's dlarfg: R[i, i] = -sign(a_ii) * norm, and a column that is
    already zero below the diagonal is left as it is (tau = 0)."""
    m, n = a.shape[-2:]
    rows = type(a).arange(m, device=a.device)
    r, q = a, type(a).eye(m, device=a.device, dtype=a.dtype).expand(*a.shape[:-2], m, m)
    for i in range(min(m, n)):
        column = r[..., :, i]
        below = (rows > i).where(column, 0)
        alpha = r[..., i : i + 1, i]  # (..., 1)
        below_squares = (below * below).sum(-1, keepdim=True)
        reflect = (below_squares > 0).detach()
        norm = reflect.where(alpha * alpha + below_squares, 1).sqrt()
        beta = (alpha < 0).where(norm, -norm)
        tau = reflect.where((beta - alpha) / beta, 0)
        v = rows.eq(i).where(1, below / reflect.where(alpha - beta, 1))  # (..., m), v[i] = 1
        r = _step(r - (tau * v).unsqueeze(-1) * (v.unsqueeze(-1) * r).sum(-2, keepdim=True))
        q = _step(q - (q * v.unsqueeze(-2)).sum(-1, keepdim=True) * (tau * v).unsqueeze(-2))
    return q, r.triu()


def _jacobi_svd(r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(U, S, V) of square matrices (..., n, n) by one-sided Jacobi: rotate pairs of columns of U = R (and of
    V = I alike) until every pair is orthogonal; then S is the column norms and U's columns are unit vectors."""
    n = r.shape[-1]
    u, v = r, type(r).eye(n, device=r.device, dtype=r.dtype).expand(r.shape)
    if n % 2:  # an even count pairs every column each round: add a zero column (it never rotates) and drop it after
        u, v = (x.pad((*((0, 0),) * (x.ndim - 1), (0, 1))) for x in (u, v))
    labels = list(range(u.shape[-1]))
    half = len(labels) // 2
    rounds = JACOBI_SWEEPS * max(1, len(labels) - 1)
    for _ in range(rounds if half else 0):
        u, v = _rotate_pairs(u, v, half)
        u, v, labels = _next_pairing(u, half), _next_pairing(v, half), _next_labels(labels, half)
    if n % 2:  # drop the pad column (the order of the others does not matter: they are sorted next)
        kept = [position for position, label in enumerate(labels) if label < n]
        u, v = u[..., :, kept], v[..., :, kept]
    s = (u * u).sum(-2).sqrt()
    s, by_size = s.sort(-1, descending=True)
    u, v = (x.gather(-1, by_size.unsqueeze(-2).expand(x.shape)) for x in (u, v))
    return u / s.eq(0).where(1, s).unsqueeze(-2), s, v


def _rotate_pairs(u: Tensor, v: Tensor, half: int) -> tuple[Tensor, Tensor]:
    """Rotate column k with column half + k (for each k < half) in the plane that makes them orthogonal."""
    a, b = u[..., :half], u[..., half:]
    alpha, beta, gamma = (a * a).sum(-2, keepdim=True), (b * b).sum(-2, keepdim=True), (a * b).sum(-2, keepdim=True)
    rotate = gamma.ne(0).detach()
    zeta = (beta - alpha) / (2 * rotate.where(gamma, 1))
    t = (zeta < 0).where(-1.0, 1.0) / (zeta.abs() + (1 + zeta * zeta).sqrt())  # tan of the smaller angle
    t = rotate.where(t, 0)
    c = (1 + t * t).rsqrt()
    s = c * t

    def turned(x: Tensor) -> Tensor:
        p, q = x[..., :half], x[..., half:]
        return _step((c * p - s * q).cat(s * p + c * q, dim=-1))

    return turned(u), turned(v)


def _next_pairing(x: Tensor, half: int) -> Tensor:
    """The circle method's next round: column 0 stays, the others move one place round the circle
    (top row 0, 1, .., half-1; bottom row half, .., 2 half - 1), so every pair of columns meets once a sweep."""
    if half == 1:
        return x
    top, bottom = x[..., :half], x[..., half:]
    return type(x).cat(top[..., :1], bottom[..., :1], top[..., 1 : half - 1], bottom[..., 1:], top[..., half - 1 :],
                       dim=-1)  # fmt: skip


def _next_labels(labels: list[int], half: int) -> list[int]:
    """_next_pairing on the host: which original column is where."""
    if half == 1:
        return labels
    top, bottom = labels[:half], labels[half:]
    return top[:1] + bottom[:1] + top[1 : half - 1] + bottom[1:] + top[half - 1 :]
