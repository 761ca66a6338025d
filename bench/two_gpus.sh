#!/usr/bin/env bash
# Issue 21's checks on a machine of 2 GPUs, in one call of about 510 s at most (each command has its timeout).
# Run from the repository root after `source .gpu/setup.sh` (PYTHONPATH, CUDA=1, the cache); every command writes
# $OUT/<name>.txt, and the end prints a summary: the tests' result lines, the all-reduce rows, the GPT-2 small runs'
# losses and tokens/s side by side, MNIST's accuracy.
#   tests:     test_distributed_gpu.py, test_nccl_ctypes.py, test_shard.py (its CUDA:0/CUDA:1 cases), and
#              test_data_parallel.py's GPU case (tiny GPT-2 split over 2 GPUs = one GPU = 2 NCCL processes)
#   allreduce: bench/allreduce.py under glassgrad's launcher and under torchrun (1 GiB float32)
#   gpt2:      examples/gpt2_train.py with GPT-2 small's sizes (12 layers, 768 wide, 12 heads, ctx 256, fp32), 20
#              steps: 1 GPU batch 8, 2 processes batch 8 each, 1 process 2 GPUs batch 8 each (SHARD=1), 1 GPU
#              batch 16. The last three should print the same losses (float tolerance); tokens/s is after step 2.
#   mnist:     GPUS=2 examples/beautiful_mnist.py (two processes), and SHARD=1 GPUS=2 (one process): >= 98%
set -u
OUT=${OUT:-/tmp/two_gpus}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

run() {  # run NAME SECONDS COMMAND...: the command's output to $OUT/NAME.txt, its exit status at the end
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "exit $rc after $((SECONDS - start)) s: $*" >> "$OUT/$name.txt"
  echo "$name: exit $rc, $((SECONDS - start)) s"
}

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader > "$OUT/gpus.txt" 2>&1

# the tests at the same time (nothing in them is timed; ports are free ones): 60 s; TESTS=0 skips them (a run of
# the whole suite on the same machine has them)
if [ "${TESTS:-1}" != 0 ]; then
run test_distributed_gpu 60 $PY -m pytest -q -p no:cacheprovider test/test_distributed_gpu.py &
run test_nccl_ctypes 60 $PY -m pytest -q -p no:cacheprovider test/test_nccl_ctypes.py &
run test_shard 60 env CUDA=1 $PY -m pytest -q -p no:cacheprovider -n 4 test/test_shard.py -k "CUDA" &
run test_data_parallel 60 $PY -m pytest -q -p no:cacheprovider test/test_data_parallel.py -k "gpus" &
wait
fi

# one at a time from here (timed): 60 + 315 + 70 s
run allreduce_glassgrad 30 $PY -m glassgrad.distributed.run --nproc-per-node 2 bench/allreduce.py
run allreduce_torchrun 30 $PY -m torch.distributed.run --nproc-per-node 2 bench/allreduce.py

# batch 8 compiles (the kernel cache then serves the two-GPU runs); batch 16 compiles its own shapes
GPT2_SMALL="LAYERS=12 WIDTH=768 HEADS=12 CTX=256 DTYPE=float32 STEPS=20 SAMPLE=0"  # no sample: no decode to compile
run gpt2_1gpu_b8 70 env $GPT2_SMALL GPUS=1 BATCH=8 $PY examples/gpt2_train.py
run gpt2_2proc_b8 100 env $GPT2_SMALL GPUS=2 BATCH=8 $PY examples/gpt2_train.py
run gpt2_shard2_b8 80 env $GPT2_SMALL SHARD=1 GPUS=2 BATCH=8 $PY examples/gpt2_train.py
run gpt2_1gpu_b16 65 env $GPT2_SMALL GPUS=1 BATCH=16 $PY examples/gpt2_train.py

run mnist_2proc 35 env GPUS=2 TARGET_ACCURACY=98 $PY examples/beautiful_mnist.py
run mnist_shard2 35 env SHARD=1 GPUS=2 TARGET_ACCURACY=98 $PY examples/beautiful_mnist.py

OUT="$OUT" $PY - <<'EOF'
import os, pathlib, re

out = pathlib.Path(os.environ["OUT"])
def text(name):
    path = out / f"{name}.txt"
    return path.read_text(errors="replace") if path.exists() else ""

print("== tests")
for name in ("test_distributed_gpu", "test_nccl_ctypes", "test_shard", "test_data_parallel"):
    lines = [l for l in text(name).splitlines() if re.search(r"passed|failed|skipped|error|^exit", l)]
    print(f"{name}: {' | '.join(lines[-2:])}")
print("== all-reduce (1 GiB float32)")
for name in ("allreduce_glassgrad", "allreduce_torchrun"):
    print(f"-- {name}\n" + "\n".join(text(name).splitlines()[-6:]))
print("== GPT-2 small, fp32, 20 steps (tokens/s after step 2)")
runs = ["gpt2_1gpu_b8", "gpt2_2proc_b8", "gpt2_shard2_b8", "gpt2_1gpu_b16"]
losses = {r: re.findall(r"step (\d+)/\d+  loss (\S+)", text(r)) for r in runs}
# the summary line's rate, else the last progress line's (a run stopped by its timeout while sampling)
rates = {r: (re.findall(r"(\S+) tokens/s", text(r)) or ["-"])[-1] for r in runs}
print("step " + "".join(f"{r:>16}" for r in runs))
for i in range(max((len(v) for v in losses.values()), default=0)):
    print(f"{i + 1:4d} " + "".join(f"{(v[i][1] if i < len(v) else '-'):>16}" for v in losses.values()))
print("tok/s" + "".join(f"{rates[r]:>16}" for r in runs))
last = {r: (re.findall(r"last step (\S+),", text(r)) or ["-"])[-1] for r in runs}
print("last " + "".join(f"{last[r]:>16}" for r in runs) + "   (the last step's loss, 6 decimals)")
print("== MNIST")
for name in ("mnist_2proc", "mnist_shard2"):
    found = re.findall(r"test accuracy\s+(\S+)%", text(name))
    print(f"{name}: final test accuracy {found[-1] if found else '-'}%; {text(name).splitlines()[-1:]}")
EOF
