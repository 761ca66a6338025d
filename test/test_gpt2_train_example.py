"""examples/gpt2_train.py runs a few steps on a small text and its loss falls (issue: a GPT-2 training example)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_gpt2_train_runs_and_its_loss_falls(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    env = {**os.environ, "TEXT": str(text), "STEPS": "12", "LAYERS": "1", "WIDTH": "32", "HEADS": "2", "CTX": "16",
           "BATCH": "8", "LR": "3e-3", "SAMPLE": "8"}  # fmt: skip
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "gpt2_train.py")], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr
    line = next(line for line in run.stdout.splitlines() if line.startswith("loss: first step"))
    first, last = (float(part.split()[-1].rstrip(",")) for part in line.split(",")[:2])
    assert last < first - 0.5, line
    assert "sample:" in run.stdout


def test_gpt2_train_says_what_is_wrong_with_its_text(tmp_path):
    env = {**os.environ, "TEXT": str(tmp_path / "missing.txt")}
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "gpt2_train.py")], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode != 0 and "is not a file" in run.stderr


def test_gpt2_train_on_two_processes_and_two_devices_matches_one_on_the_combined_batch(tmp_path):
    """GPUS=2 BATCH=4 (DistributedDataParallel, two processes on the CPU) and SHARD=1 GPUS=2 BATCH=4 (one process,
    the batch split over CPU:0 and CPU:1) print the losses of GPUS=1 BATCH=8."""
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    losses, cpu_env = {}, {k: v for k, v in os.environ.items() if k != "CUDA"}  # one GPU can't hold two NCCL ranks
    for name, gpus, batch, shard in (("one", "1", "8", "0"), ("processes", "2", "4", "0"), ("split", "2", "4", "1")):
        env = {**cpu_env, "PYTHONPATH": str(ROOT), "TEXT": str(text), "STEPS": "6", "LAYERS": "1", "WIDTH": "32",
               "HEADS": "2", "CTX": "16", "BATCH": batch, "GPUS": gpus, "SHARD": shard, "LR": "3e-3",
               "SAMPLE": "4"}  # fmt: skip
        run = subprocess.run([sys.executable, str(ROOT / "examples" / "gpt2_train.py")], env=env, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        losses[name] = [float(x) for x in re.findall(r"step \d+/6  loss (\S+)", run.stdout)]
        assert len(losses[name]) == 6, run.stdout
        assert "sample:" in run.stdout and "tokens/s after step 2" in run.stdout
    assert losses["processes"] == pytest.approx(losses["one"], abs=1.5e-3)  # as printed, to 3 decimals
    assert losses["split"] == pytest.approx(losses["one"], abs=1.5e-3)
    assert losses["one"][-1] < losses["one"][0]
