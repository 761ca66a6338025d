"""examples/resnet_train.py trains a small ResNet on CIFAR-shaped digits and reports its speed and accuracy."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"STEPS": "3", "BS": "8", "WIDTH": "4", "BLOCKS": "1", "EVAL": "32", "EVAL_BS": "16", "DATA": "mnist"}


def run(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "examples" / "resnet_train.py")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=600)  # fmt: skip


def test_resnet_train_reports_images_a_second_and_accuracy():
    done = run(**SMALL)
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"images/s: (\d+) .*test accuracy: ([\d.]+)% of 32", done.stdout)
    assert found, done.stdout
    assert int(found[1]) > 0 and 0.0 <= float(found[2]) <= 100.0
    assert "training" in done.stderr and "3/3" in done.stderr  # the progress bar reached the end


def test_resnet_train_names_where_it_looked_for_the_data(tmp_path):
    done = run(**SMALL, DATA_DIR=str(tmp_path))
    assert done.returncode != 0
    assert str(tmp_path) in done.stderr and "Traceback" not in done.stderr.splitlines()[-1]
