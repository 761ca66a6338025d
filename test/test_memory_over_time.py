"""Memory over time: a loop that makes and drops tensors keeps the same number of things alive call after call, and
its memory stays flat. Each measure runs in a process of its own, so that other tests' state does not count."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from glassgrad import Tensor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COUNTS = """
import gc, json
from glassgrad.engine import lazy as live
from glassgrad import Device, Tensor
from glassgrad.engine import realize
from glassgrad.engine import schedule_cache as cache
from glassgrad.uop import ops


def alive():
    gc.collect()
    return {"live tensors": len(live.live_tensors()),
            "graph nodes": len(ops._interned), "replaced nodes": len(live.replaced),
            "cached schedules": len(cache._cache), "compiled kernels": len(realize._kernels),
            "loaded programs": len(Device["CPU"].programs)}
"""


def run_python(code: str, prelude: str = "") -> dict:
    env = {**os.environ, "PYTHONPATH": REPO, "NO_COLOR": "1", "CPU": "1"}
    command = [sys.executable, "-c", prelude + textwrap.dedent(code)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_randint_in_a_loop_keeps_the_same_things_alive_after_call_100_and_call_2000():
    found = run_python(
        prelude=COUNTS,
        code="""
    for call in range(1, 2001):
        Tensor.randint(512).realize()
        if call == 100:
            at_100 = alive()
    print(json.dumps({"at 100": at_100, "at 2000": alive()}))
    """,
    )
    assert found["at 100"] == found["at 2000"]


def test_rss_grows_under_10_mb_over_10000_created_and_dropped_tensors_after_warm_up():
    found = run_python("""
    import gc, json, resource
    import numpy as np
    from glassgrad import Tensor

    def rss_mb():
        return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20

    shapes = [(1,), (3,), (7,), (64,), (1000,), (2, 3), (5, 1, 4), (16, 16), (0, 3), (31, 33)]
    base = {s: Tensor(np.arange(int(np.prod(s)), dtype=np.float32).reshape(s)).realize() for s in shapes}

    def make(i):  # five ways to make a tensor, each over every shape
        s, way = shapes[i % len(shapes)], i // len(shapes) % 5
        if way == 0:
            return Tensor(np.ones(s, np.float32)).realize()
        if way == 1:
            return Tensor.full(s, 2.0).contiguous().realize()
        if way == 2:
            return (base[s] * 2 + 1).realize()
        if way == 3:
            return Tensor.rand(*s).realize()
        return Tensor.arange(int(np.prod(s))).reshape(s).realize()

    for i in range(1000):
        make(i)
    gc.collect()
    before = rss_mb()
    for i in range(10000):
        make(i)
    gc.collect()
    print(json.dumps({"before": before, "after": rss_mb()}))
    """)
    assert found["after"] - found["before"] < 10, found


def test_past_the_kernel_cache_size_the_oldest_kernels_are_unloaded_and_still_right_when_used_again():
    found = run_python(
        prelude=COUNTS,
        code="""
    from glassgrad.engine import realize
    realize.KERNEL_CACHE_SIZE = 4

    def libraries():  # the kernels' shared libraries mapped into this process (loaded from deleted temporary files)
        return len({line.split()[-2] for line in open("/proc/self/maps") if ".so (deleted)" in line})

    x = Tensor([1.0, 2.0, 3.0]).realize()
    values = [(x + c).tolist() for c in range(12)]  # each constant is a kernel of its own
    counts = alive()
    again = (x + 0).tolist()  # its kernel was unloaded: compiled (from the disk cache) and loaded again
    print(json.dumps({"values": values, "again": again, "counts": counts, "libraries": libraries()}))
    """,
    )
    assert found["values"] == [[1.0 + c, 2.0 + c, 3.0 + c] for c in range(12)] and found["again"] == [1.0, 2.0, 3.0]
    assert found["counts"]["compiled kernels"] == 4 and found["counts"]["loaded programs"] <= 4
    assert found["libraries"] <= 4 + 1  # the kernels kept, and the one just loaded again


def test_assigning_a_value_built_on_itself_keeps_the_graph_the_same_size(device):
    state = Tensor([1.0, 2.0]).contiguous().realize()
    expected = np.array([1.0, 2.0], np.float32)
    sizes = []
    for _ in range(30):
        copy = state.clone()  # reads the assign still pending from the step before, which realizing runs
        state.assign(state + 1.0)
        np.testing.assert_equal(copy.numpy(), expected)
        expected = expected + 1
        sizes.append(len(state.uop.toposort()))
    assert len(set(sizes[2:])) == 1, sizes  # before: every step's graph hung on the next one's
    np.testing.assert_equal(state.numpy(), expected)
