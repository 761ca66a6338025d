"""What a device-side check costs: lookups timed with their index checks and without, kernel against kernel.

Run: python bench/checks.py            (REPEATS=200 by default; DEV=CUDA for the GPU)

The kernels run on one core (NUM_CPU_THREADS=1 unless set): threaded, their times on a shared machine follow what
else runs there more than what they compute.

Each case is scheduled once; its kernel is compiled twice, from its AST as it is (CHECK nodes: the kernel tests
every index and records a failure in the error buffer) and from the same AST with the CHECK nodes taken out (what
the lookup compiled to before checks existed). Both run on the same buffers, alternating, and the medians of their
times are compared: the ratio is what the check costs in the kernel that computes the index.
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("NUM_CPU_THREADS", "1")  # read when glassgrad is imported

import numpy as np  # noqa: E402

from bench.common import header  # noqa: E402
from glassgrad import Device, Tensor, nn  # noqa: E402
from glassgrad.engine.checks import error_buffer  # noqa: E402
from glassgrad.engine.realize import buffer_of, get_kernel  # noqa: E402
from glassgrad.uop.ops import Ops  # noqa: E402

REPEATS = int(os.environ.get("REPEATS", 200))


def _cases() -> dict[str, Tensor]:
    rng = np.random.default_rng(0)
    table = Tensor(rng.standard_normal((50_000, 128)).astype(np.float32)).realize()
    ids = Tensor(rng.integers(0, 50_000, 16_384).astype(np.int32)).realize()
    embedding = nn.Embedding(50_000, 128)
    embedding.weight = table
    x = Tensor(rng.standard_normal((2048, 1024)).astype(np.float32)).realize()
    picks = Tensor(rng.integers(0, 1024, (2048, 256)).astype(np.int64)).realize()
    labels = Tensor(rng.integers(0, 1000, 4096).astype(np.int32)).realize()
    return {
        "nn.Embedding(50000, 128), 16384 ids": embedding(ids),
        "table[ids] (negative ids wrap)": table[ids],
        "x.gather(1, index), (2048, 1024) -> (2048, 256)": x.gather(1, picks),
        "one_hot(1000) of 4096 labels": labels.one_hot(1000),
    }


def _without_checks(ast):
    return ast.substitute({n: n.src[0] for n in ast.toposort() if n.op is Ops.CHECK})


def main() -> None:
    header("device checks: lookups with their index checks against the same kernels without")
    print(f"{'case':<50} {'checked us':>11} {'unchecked us':>13} {'ratio':>7}")
    for name, out in _cases().items():
        (item,) = [i for i in out.schedule() if i.ast.op is Ops.SINK]
        device = Device.canonicalize(out.device)
        checked, plain = get_kernel(device, item.ast), get_kernel(device, _without_checks(item.ast))
        assert checked.spec.checks and not plain.spec.checks, "the case has no check, or it was not taken out"
        bufs = [buffer_of(b) for b in item.bufs]
        with_errors = [*bufs, error_buffer(device)]
        times: dict[str, list[float]] = {"checked": [], "plain": []}
        for run in range(REPEATS + 10):  # alternating, so that both see the same machine
            a, b = checked(with_errors, wait=True), plain(bufs, wait=True)
            if run >= 10:
                times["checked"].append(a)
                times["plain"].append(b)
        c, p = statistics.median(times["checked"]) * 1e6, statistics.median(times["plain"]) * 1e6
        print(f"{name:<50} {c:11.1f} {p:13.1f} {c / p:7.3f}")


if __name__ == "__main__":
    main()
