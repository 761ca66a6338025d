"""examples/tinygrad_mnist.py, tinygrad 0.14's MNIST example with only the import renamed, runs as a user runs it and
trains: a few steps (STEPS=3, as the script reads it with getenv) end without an error and the loss falls.

The full run (70 steps, about 98% on the test set) takes minutes on a CPU; TARGET_EVAL_ACC_PCT=98 makes the script
check it. The script is run in a fresh interpreter, as `python examples/tinygrad_mnist.py`, so nothing of this test
process (flags, seeds, the default device) leaks into it.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "tinygrad_mnist.py"
# the progress bar's text: the description the script sets, then the bar and the count of steps done
PROGRESS = re.compile(
    r"loss:\s+(?P<loss>\S+) test_accuracy:\s+(?P<acc>\S+)%: +\d+%\|[^|]*\| (?P<done>\d+)/(?P<total>\d+)"
)


def run_script(env: dict[str, str]) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", **env}
    return subprocess.run([sys.executable, str(SCRIPT)], env=full_env, cwd=ROOT, capture_output=True, text=True,
                          timeout=900)  # fmt: skip


def losses_by_step(progress_text: str, steps: int) -> list[float]:
    """The loss of each step, as the progress bar showed it: step i's description is drawn while i steps are done."""
    shown = {}
    for m in PROGRESS.finditer(progress_text):
        assert int(m["total"]) == steps, m.group(0)
        shown[int(m["done"])] = float(m["loss"])  # the last drawing at each count carries that step's description
    assert sorted(shown) == list(range(steps + 1)), progress_text
    return [shown[i] for i in range(steps)]


@pytest.mark.slow
def test_tinygrad_mnist_example_runs_unchanged_and_its_loss_falls():
    steps = 3
    done = run_script({"STEPS": str(steps)})
    assert done.returncode == 0, done.stderr[-4000:]
    losses = losses_by_step(done.stderr, steps)
    # a batch of 512 random images: about 2.3 (ln 10, chance) at first, then Adam brings it down step by step
    assert 1.5 < losses[0] < 5.0, losses
    assert losses[-1] < losses[0] - 0.3, losses
