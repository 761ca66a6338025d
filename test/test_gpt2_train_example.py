"""examples/gpt2_train.py runs a few steps on a small text and its loss falls (issue: a GPT-2 training example)."""

import os
import pathlib
import subprocess
import sys

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
