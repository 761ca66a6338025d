"""Time over a long loop: `Tensor.randint(512).realize()` called 2,000 times, without TinyJit.

Run: python bench/randint.py     (CALLS=2000; AT=10,500,1000,2000: the calls reported)

Prints, for each call in AT, the median milliseconds of the ten calls ending there, and the process's resident memory
then. Nothing a call leaves behind should accumulate: the time and the memory should stay flat (before the fix of
issue 25 the random generator's state kept every earlier call's graph alive: 3.7 ms at call 10, 176 ms at 1000).
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from glassgrad import Tensor  # noqa: E402

CALLS = int(os.environ.get("CALLS", 2000))
AT = [int(n) for n in os.environ.get("AT", "10,500,1000,2000").split(",")]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    seconds = []
    print(f"{'call':>6} {'ms per call':>12} {'RSS MB':>8}")
    for call in range(1, CALLS + 1):
        start = time.perf_counter()
        Tensor.randint(512).realize()
        seconds.append(time.perf_counter() - start)
        if call in AT:
            print(f"{call:6d} {statistics.median(seconds[-10:]) * 1e3:12.2f} {rss_mb():8.1f}")


if __name__ == "__main__":
    main()
