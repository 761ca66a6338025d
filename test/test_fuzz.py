"""A few hundred seeded cases of the differential fuzzer (test/fuzz/), each against PyTorch: values, dtypes and
gradients of random programs on the CPU and PYTHON devices. The ops and features of the known failures
(test/fuzz/known.py, each naming the fix it waits for) are left out; every other failure fails this test with its
reproducer. `python -m test.fuzz --cases 20000` runs the long version."""

import math

import pytest
import torch

from test.fuzz.driver import Options, run_cases, run_guarded
from test.fuzz.generator import OPS
from test.fuzz.known import FEATURES, KNOWN_FAILURES
from test.fuzz.ops_shape import _prod

CHUNKS, PER_CHUNK = 8, 25  # 200 cases in chunks that xdist spreads over its workers
FIRST_SEED = 1_000_000  # away from the seeds a developer tries by hand


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_cases(chunk: int):
    seeds = range(FIRST_SEED + chunk * PER_CHUNK, FIRST_SEED + (chunk + 1) * PER_CHUNK)
    results = run_cases(seeds, Options(exclude=frozenset(KNOWN_FAILURES)))
    failed = [r for r in results if r.kind]
    report = "\n\n".join(f"seed {r.seed}: {r.kind}\n{r.message}\n{r.reproducer}" for r in failed)
    assert not failed, f"{len(failed)} of {len(results)} fuzz cases failed:\n\n{report}"


def test_a_case_that_kills_its_process_is_named_and_the_run_goes_on():
    results = run_guarded([5, 6, 7], Options(ops=["reshape"], die_on=6))
    assert [(r.seed, (r.kind or "").split(":")[0]) for r in results] == [(5, ""), (6, "crash"), (7, "")]
    assert "exit code -11" in results[1].message and "outs = [" in results[1].reproducer


def test_each_known_failure_names_an_op_or_a_feature():
    """A misspelt entry would leave nothing out, silently."""
    assert set(KNOWN_FAILURES) <= set(OPS) | set(FEATURES), set(KNOWN_FAILURES) - set(OPS) - set(FEATURES)


def test_the_prod_reference_takes_each_slice_by_itself():
    """PyTorch's prod(dim) picks its gradient formula by a zero anywhere in the input; the reference, per slice."""
    grads = []
    for other_row in ([1.0, 2.0, 1.0], [1.0, 0.0, 1.0]):
        x = torch.tensor([[math.inf, 1.0, 2.0], other_row], requires_grad=True)
        _prod(x, (1,), False).sum().backward()
        alone = torch.tensor([math.inf, 1.0, 2.0], requires_grad=True)
        alone.prod().backward()
        assert torch.equal(x.grad[0].isnan(), alone.grad.isnan()) and torch.equal(x.grad[0][1:], alone.grad[1:])
        grads.append(x.grad[0])
    assert torch.equal(grads[0].isnan(), grads[1].isnan())
