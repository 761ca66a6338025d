"""glassgrad.distributed through NCCL on two GPUs: test_distributed.py's collectives and TinyJit replays, run by two
processes (one a GPU) with backend "nccl". Skips without two GPUs, or without NCCL (the `multigpu` extra)."""

from __future__ import annotations

import numpy as np
import pytest

from glassgrad.distributed import DistBackendError, nccl
from helpers import CUDA_MISSING
from test_distributed import (
    CASE_IDS,
    WORKER,
    cases,
    check_collective,
    check_ddp_matches_one_process,
    check_replays,
    launch,
    run_collectives,
)


def _why_not() -> str | None:
    if CUDA_MISSING is not None:
        return f"needs 2 GPUs: {CUDA_MISSING}"
    from glassgrad.runtime.ops_cuda import init_driver

    if init_driver() < 2:
        return f"needs 2 GPUs; the driver sees {init_driver()}"
    try:
        nccl.libnccl()
    except DistBackendError as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


@pytest.fixture(scope="module")
def nccl_results(tmp_path_factory):
    return run_collectives(tmp_path_factory.mktemp("nccl"), TEST_BACKEND="nccl")


@pytest.mark.parametrize("i, case", list(enumerate(cases())), **CASE_IDS)
def test_nccl_collective_matches_numpy(nccl_results, i, case):
    check_collective(nccl_results, i, case)


def test_tinyjit_replays_the_nccl_all_reduce(nccl_results):
    check_replays(nccl_results)


def test_two_gpus_train_as_one_gpu_on_the_combined_batch(tmp_path):
    done = launch(str(WORKER), "ddp", str(tmp_path), TEST_BACKEND="nccl")
    assert done.returncode == 0, done.stdout + done.stderr
    check_ddp_matches_one_process([dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)], "CUDA")
