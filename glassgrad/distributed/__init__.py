"""Several processes, on one host or several: torch.distributed's names over glassgrad Tensors.

`init_process_group()` joins the job the environment describes (torchrun's variables; glassgrad's launcher is
`python -m glassgrad.distributed.run`); the collectives run through NCCL on CUDA tensors, through the store
elsewhere; DistributedDataParallel averages a model's gradients over the ranks after each backward.
"""

from glassgrad.distributed.collectives import (
    ReduceOp,
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    broadcast,
    reduce_scatter,
    reduce_scatter_tensor,
)
from glassgrad.distributed.ddp import DistributedDataParallel
from glassgrad.distributed.group import (
    barrier,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
)
from glassgrad.distributed.nccl import DistBackendError
from glassgrad.distributed.store import DistError, DistNetworkError, DistStoreError, TCPStore

__all__ = [
    "DistBackendError",
    "DistError",
    "DistNetworkError",
    "DistStoreError",
    "DistributedDataParallel",
    "ReduceOp",
    "TCPStore",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "reduce_scatter",
    "reduce_scatter_tensor",
]
