"""The process group: which rank this process is, of how many, and the store they share.

`init_process_group` reads what torchrun (and glassgrad's launcher, glassgrad/distributed/run.py) sets: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Rank 0 serves the store on MASTER_ADDR:MASTER_PORT, unless the
launcher serves it (GLASSGRAD_STORE_SERVED=1: the store then outlives every rank). Under torchrun, whose own store
holds MASTER_PORT, glassgrad's store takes the port after it.
"""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from glassgrad.distributed.store import DistError, DistNetworkError, DistStoreError, TCPStore
from glassgrad.runtime.device import Device
from glassgrad.runtime.ops_cuda import init_driver

DEFAULT_TIMEOUT = 1800.0  # seconds, torch.distributed's default
REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
BACKENDS = {"cpu": "cpu", "gloo": "cpu", "nccl": "nccl"}  # gloo: torch's CPU backend, here the copy-based one


@dataclass
class ProcessGroup:
    """The ranks of one job and the store through which they meet."""

    rank: int
    world_size: int
    local_rank: int
    store: TCPStore
    backend: str
    timeout: float
    calls: int = 0  # collectives so far: the same count on every rank names the same call
    communicators: dict[str, Any] = field(default_factory=dict)  # NCCL's, by device

    def exchange(self, what: str, payload: bytes) -> list[bytes]:
        """Every rank's `payload` for the next call (`what` it is, for errors), in rank order. The ranks meet at
        the call's number, not its name, so ranks that call different collectives get each other's messages and can
        say so; the last rank to read them frees them."""
        self.calls += 1
        key = f"call {self.calls}"
        self.store.set(f"{key}/{self.rank}", payload)
        values = []
        for r in range(self.world_size):
            try:
                values.append(payload if r == self.rank else self.store.get(f"{key}/{r}", self.timeout))
            except DistStoreError:
                raise DistStoreError(f"glassgrad.distributed: {what} (call {self.calls}) timed out after "
                                     f"{self.timeout:g} s: rank {r} of {self.world_size} did not reach it (this is "
                                     f"rank {self.rank}); every rank must call the same collectives in the same "
                                     "order") from None  # fmt: skip
        if self.store.add(f"{key}/read", 1) == self.world_size:
            self.store.delete_prefix(f"{key}/")
        return values


_group: ProcessGroup | None = None
_failing = False  # an exception ended the program: leave at exit without waiting for the other ranks
_exit_hooks: list = []  # registered once per process
EXIT_WAIT = 60.0  # seconds rank 0, serving the store, waits at exit for the others to read its last messages


def init_process_group(backend: str | None = None, timeout: float | timedelta | None = None) -> None:
    """Join the job the environment describes (torchrun's variables); backend "nccl" for CUDA tensors, "cpu" (alias
    "gloo") copies through the store; None picks "nccl" where the default device is CUDA. With "nccl", each process's
    default device becomes CUDA:LOCAL_RANK."""
    global _group
    if _group is not None:
        raise RuntimeError("init_process_group: the process group is already initialized; call "
                           "destroy_process_group() first")  # fmt: skip
    env = _environment()
    rank, world_size, local_rank = env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]
    chosen = _backend(backend)
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout or DEFAULT_TIMEOUT)
    if chosen == "nccl":
        Device.DEFAULT = _gpu_of(local_rank)
        Device[Device.DEFAULT]  # a process whose GPU does not exist fails here, naming it
    served = os.environ.get("GLASSGRAD_STORE_SERVED") == "1"
    store = TCPStore(env["MASTER_ADDR"], store_port(), is_master=rank == 0 and not served, timeout=seconds)
    _group = ProcessGroup(rank, world_size, local_rank, store, chosen, seconds)
    if not _exit_hooks:
        _exit_hooks.append(atexit.register(_leave_at_exit))
        sys.excepthook = _noting_failure(sys.excepthook)
    barrier()  # every rank is here: a rank that can't connect fails now, not in its first collective


def _gpu_of(local_rank: int) -> str:
    """CUDA:LOCAL_RANK; CUDA where the process sees one GPU only (a scheduler that gives each its own)."""
    return "CUDA" if init_driver() == 1 else f"CUDA:{local_rank}"


def store_port() -> int:
    """The port of glassgrad's store: MASTER_PORT, or the next one under torchrun (its own store holds MASTER_PORT)."""
    port = int(os.environ["MASTER_PORT"])
    return port + 1 if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") else port


def _environment() -> dict[str, Any]:
    for name in REQUIRED:
        if not os.environ.get(name):
            raise ValueError(f"init_process_group: the environment variable {name} is not set; start each process "
                             "with `python -m glassgrad.distributed.run --nproc-per-node N script.py` (or torchrun), "
                             f"which sets {', '.join(REQUIRED)}")  # fmt: skip
    values: dict[str, Any] = {"MASTER_ADDR": os.environ["MASTER_ADDR"]}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        try:
            values[name] = int(os.environ[name])
        except ValueError:
            raise ValueError(f"init_process_group: {name}={os.environ[name]!r} is not an integer") from None
    if not 0 <= values["RANK"] < values["WORLD_SIZE"]:
        raise ValueError(f"init_process_group: RANK={values['RANK']} is not in [0, WORLD_SIZE={values['WORLD_SIZE']})")
    if not 0 < values["MASTER_PORT"] < 65536:
        raise ValueError(f"init_process_group: MASTER_PORT={values['MASTER_PORT']} is not a port (1 to 65535)")
    return values


def _backend(backend: str | None) -> str:
    if backend is None:
        return "nccl" if Device.DEFAULT.split(":")[0] == "CUDA" else "cpu"
    if backend.lower() not in BACKENDS:
        raise ValueError(f"init_process_group: unknown backend {backend!r}; glassgrad has 'nccl' (CUDA tensors) and "
                         "'cpu' (alias 'gloo': copies through the store, for any device)")  # fmt: skip
    return BACKENDS[backend.lower()]


def group() -> ProcessGroup:
    """The process group, or a RuntimeError saying to call init_process_group first."""
    if _group is None:
        raise RuntimeError("glassgrad.distributed: the default process group is not initialized; call "
                           "init_process_group() first")  # fmt: skip
    return _group


def is_initialized() -> bool:
    """Whether init_process_group has run (and destroy_process_group not since)."""
    return _group is not None


def get_rank() -> int:
    """This process's rank, 0 to world size - 1."""
    return group().rank


def get_world_size() -> int:
    """The number of processes in the group."""
    return group().world_size


def barrier() -> None:
    """Wait until every rank has reached this call."""
    group().exchange("barrier", b"barrier")


def destroy_process_group() -> None:
    """Leave the group: NCCL's communicators are freed; rank 0, where it serves the store, waits for every rank to
    leave before it stops serving."""
    global _group
    g = group()
    _group = None
    for communicator in g.communicators.values():
        communicator.destroy()
    try:
        if g.store.add("left", 1) == g.world_size:
            g.store.set("all left", b"")
        if g.store.server is not None and not _failing:  # the others may still read this rank's last messages
            g.store.get("all left", min(g.timeout, EXIT_WAIT))
    except DistError:  # a rank that failed (the launcher stops the rest), or a store gone with a served launcher
        pass
    finally:
        g.store.close()


def _noting_failure(previous: Any) -> Any:
    def hook(*exc: Any) -> None:
        global _failing
        _failing = True
        previous(*exc)

    return hook


def _leave_at_exit() -> None:
    if _group is not None:
        try:
            destroy_process_group()
        except (DistNetworkError, OSError):
            pass
