"""A fused 5-op elementwise chain and a row sum over 16M float32: glassgrad vs NumPy, PyTorch, tinygrad.

Run: python bench/elementwise.py   (GB/s counts bytes read plus bytes written; higher is better)
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

from bench.common import header, median_seconds, print_table, tinygrad_cpu  # noqa: E402
from glassgrad import Tensor  # noqa: E402

N = 16 * 1024 * 1024
ROWS = COLS = 4096
CHAIN_BYTES = 2 * N * 4  # one read, one write
ROWSUM_BYTES = ROWS * COLS * 4 + ROWS * 4


def chain_numpy(x):
    return np.exp(x * 2.0 + 1.0) * 0.5 - 3.0


def main() -> None:
    header("elementwise: 5-op chain y = exp(x*2+1)*0.5-3 and row sum, float32")
    rng = np.random.default_rng(0)
    x_np = rng.random(N, dtype=np.float32)
    m_np = rng.random((ROWS, COLS), dtype=np.float32)
    rows: list[tuple[str, str, float]] = []

    def record(work: str, framework: str, seconds: float, nbytes: int) -> None:
        rows.append((work, framework, nbytes / seconds / 1e9))

    record("5-op chain, GB/s", "numpy", median_seconds(lambda: chain_numpy(x_np)), CHAIN_BYTES)
    record("row sum 4096x4096, GB/s", "numpy", median_seconds(lambda: m_np.sum(axis=1)), ROWSUM_BYTES)

    try:
        import torch

        x_t, m_t = torch.from_numpy(x_np), torch.from_numpy(m_np)
        record("5-op chain, GB/s", "torch", median_seconds(lambda: (x_t * 2 + 1).exp() * 0.5 - 3), CHAIN_BYTES)
        record("row sum 4096x4096, GB/s", "torch", median_seconds(lambda: m_t.sum(dim=1)), ROWSUM_BYTES)
    except ImportError:
        print("# torch not installed: skipped")

    x_g, m_g = Tensor(x_np).realize(), Tensor(m_np).realize()
    record("5-op chain, GB/s", "glassgrad", median_seconds(lambda: ((x_g * 2 + 1).exp() * 0.5 - 3).realize()),
           CHAIN_BYTES)  # fmt: skip
    record("row sum 4096x4096, GB/s", "glassgrad", median_seconds(lambda: m_g.sum(axis=1).realize()), ROWSUM_BYTES)

    TinyTensor = tinygrad_cpu()
    if TinyTensor is not None:
        x_tg, m_tg = TinyTensor(x_np).realize(), TinyTensor(m_np).realize()
        record("5-op chain, GB/s", "tinygrad 0.14 (CPU)",
               median_seconds(lambda: ((x_tg * 2 + 1).exp() * 0.5 - 3).realize()), CHAIN_BYTES)  # fmt: skip
        record("row sum 4096x4096, GB/s", "tinygrad 0.14 (CPU)", median_seconds(lambda: m_tg.sum(axis=1).realize()),
               ROWSUM_BYTES)  # fmt: skip
    else:
        print("# tinygrad not installed: skipped")

    check = ((x_g * 2 + 1).exp() * 0.5 - 3).numpy()
    assert np.allclose(check, chain_numpy(x_np), rtol=1e-5, atol=1e-5), "glassgrad's chain differs from NumPy"
    assert np.allclose(m_g.sum(axis=1).numpy(), m_np.sum(axis=1), rtol=1e-4), "glassgrad's row sum differs"
    print_table(rows, "GB/s", "numpy")


if __name__ == "__main__":
    main()
