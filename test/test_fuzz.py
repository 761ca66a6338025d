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
from test.fuzz.reference import Undefined

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


@pytest.mark.parametrize(
    "values, decided",
    [([-1.1875, 0.3457, -3.004e38, -2.53125, -0.539, 1.8125], True), ([3e38, 0.5, 2.0], True),
     ([3e38, 2.0, 2.0], False), ([3e38, 0.5, 0.5], False), ([1e20, 1e20, 1e-30], True), ([math.inf, 2.0], False)],
    ids=["seed 12099", "3e38 halved then doubled", "overflows in every order", "never overflows",
         "1e20 * 1e20 before 1e-30", "an inf"],
)  # fmt: skip
def test_the_prod_reference_refuses_a_slice_that_overflows_in_some_orders_only(values, decided):
    """Fuzz seed 12099: the float32 product 3.05e38 is inf in glassgrad's lanes (-1.19 * -3e38 first) and a number
    in PyTorch's short sequential product; PyTorch's own vectorized lanes overflow the same way on longer slices."""
    x = torch.tensor([values, [1.0] * len(values)])
    if decided:
        with pytest.raises(Undefined):
            _prod(x, (1,), False)
    else:
        torch.testing.assert_close(_prod(x, (1,), False), x.double().prod(1).float(), equal_nan=True)


def test_pytorchs_own_prod_overflows_by_its_order():
    """Why the reference refuses such slices rather than taking PyTorch's value: its vectorized lanes multiply 3e38
    by 2 (index 16) before by 0.5 (index 1), where its sequential order gives 3e38."""
    vectorized = torch.ones(64)
    vectorized[0], vectorized[1], vectorized[16] = 3e38, 0.5, 2.0
    assert vectorized.prod().item() == math.inf
    assert torch.tensor([3e38, 0.5, 2.0]).prod().item() == torch.tensor(3e38).item()
