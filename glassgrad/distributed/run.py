"""The launcher: `python -m glassgrad.distributed.run --nproc-per-node N script.py args...` (torchrun's flags).

It starts N processes of the script on this host with the variables init_process_group reads (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Several hosts: one launcher per host, each with the same
--nnodes, --master-addr (host 0's address) and --master-port, and its own --node-rank. The launcher of node 0 serves
the store, so it outlives every rank. Ctrl-C and SIGTERM go to every process; when one fails, the launcher stops
the others, names the failed rank and exits with its code.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import NoReturn

from glassgrad.distributed.store import StoreServer

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 5.0  # after SIGTERM, how long the other ranks get to exit before SIGKILL


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m glassgrad.distributed.run", description=__doc__.split("\n")[0])
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, help="processes on this host")
    parser.add_argument("--nnodes", type=int, default=1, help="hosts in the job")
    parser.add_argument("--node-rank", "--node_rank", type=int, default=0, help="this host's number, 0 to nnodes-1")
    parser.add_argument("--master-addr", "--master_addr", default="127.0.0.1", help="the address of node 0")
    parser.add_argument("--master-port", "--master_port", type=int, default=29500, help="the store's port on node 0")
    parser.add_argument("-m", "--module", action="store_true", help="run `script` as a module (python -m)")
    parser.add_argument("script", help="the script (or module, with -m) every process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    args = parser.parse_args(argv)
    if args.nproc_per_node < 1 or args.nnodes < 1:
        parser.error("--nproc-per-node and --nnodes must be at least 1")
    if not 0 <= args.node_rank < args.nnodes:
        parser.error(f"--node-rank {args.node_rank} is not in [0, --nnodes={args.nnodes})")
    return args


def child_environment(args: argparse.Namespace, local_rank: int) -> dict[str, str]:
    """The environment of one process: this one's, plus the job's variables."""
    env = dict(os.environ)
    env.update(
        RANK=str(args.node_rank * args.nproc_per_node + local_rank),
        WORLD_SIZE=str(args.nnodes * args.nproc_per_node),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(args.nproc_per_node),
        GROUP_RANK=str(args.node_rank),
        MASTER_ADDR=args.master_addr,
        MASTER_PORT=str(args.master_port),
        GLASSGRAD_STORE_SERVED="1",
    )
    return env


def _say(text: str) -> None:
    print(f"glassgrad.distributed.run: {text}", file=sys.stderr, flush=True)


def _outcome(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop(children: list[subprocess.Popen]) -> None:
    """SIGTERM to those still running, SIGKILL to those still running GRACE_SECONDS later."""
    for p in children:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for p in children:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(args: argparse.Namespace) -> int:
    """Run the processes until all succeed (0) or one fails (its exit code; 128 + the signal that killed it)."""
    store = StoreServer(args.master_addr, args.master_port) if args.node_rank == 0 else None
    command = [sys.executable, *(["-m"] if args.module else []), args.script, *args.args]
    children: list[subprocess.Popen] = []

    def forward(signum: int, frame: object) -> None:
        for p in children:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        for local_rank in range(args.nproc_per_node):  # own sessions: a terminal's Ctrl-C reaches them once, from here
            env = child_environment(args, local_rank)
            children.append(subprocess.Popen(command, env=env, start_new_session=True))
        return _watch(args, children)
    finally:
        _stop(children)
        for s, handler in previous.items():
            signal.signal(s, handler)
        if store is not None:
            store.close()


def _watch(args: argparse.Namespace, children: list[subprocess.Popen]) -> int:
    while True:
        codes = [p.poll() for p in children]
        for local_rank, (p, code) in enumerate(zip(children, codes)):
            if code not in (None, 0):
                rank = args.node_rank * args.nproc_per_node + local_rank
                _say(f"rank {rank} (local rank {local_rank}, pid {p.pid}) {_outcome(code)}; stopping the others")
                return code if code > 0 else 128 - code
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.05)


def relaunch(nproc: int) -> NoReturn:
    """Run this script again as `nproc` processes under the launcher (on a free port) in place of this process: a
    script's `GPUS=N` (examples/beautiful_mnist.py)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # where glassgrad is
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    script = os.path.abspath(sys.argv[0])
    flags = ["--nproc-per-node", str(nproc), "--master-port", str(port)]
    os.execv(sys.executable, [sys.executable, "-m", "glassgrad.distributed.run", *flags, script, *sys.argv[1:]])


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        return launch(args)
    except OSError as e:  # the store's port taken, the script's interpreter missing
        _say(f"cannot start: {e.strerror or e} (--master-port {args.master_port}, {args.script})")
        return 1


if __name__ == "__main__":
    sys.exit(main())
