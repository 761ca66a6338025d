"""Sum a tensor over every process: python -m glassgrad.distributed.run --nproc-per-node 2 examples/all_reduce.py"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import glassgrad.distributed as dist  # noqa: E402
from glassgrad import Tensor  # noqa: E402

dist.init_process_group()  # reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
t = Tensor.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)  # in place: every rank now holds 1 + 2 + ... + WORLD_SIZE
if dist.get_rank() == 0:
    print(f"{dist.get_world_size()} ranks, all_reduce: {t.tolist()}")
dist.destroy_process_group()
