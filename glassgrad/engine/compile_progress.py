"""The one line a realize prints on stderr when its compiling takes longer than a moment (PROGRESS=0: none; nor
under DEBUG=3 and up, which print each kernel's source as it is made)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType

from glassgrad.helpers import DEBUG, PROGRESS

AFTER_S = 1.0  # a compile shorter than this says nothing


class CompileProgress:
    """`with CompileProgress(n, device):` around compiling n kernels: past AFTER_S seconds it writes
    `glassgrad: compiling n kernels for DEVICE...` to stderr, and ` done in 7.1 s` on the same line when it ends."""

    def __init__(self, kernels: int, device: str):
        self.kernels, self.device = kernels, device
        self.started, self.shown = time.perf_counter(), False
        self.lock = threading.Lock()
        self.timer = threading.Timer(AFTER_S, self.show) if PROGRESS.value and DEBUG.value < 3 else None

    def show(self) -> None:
        with self.lock:
            if self.timer is None:  # ended meanwhile
                return
            self.shown = True
            what = f"{self.kernels} kernel{'s' if self.kernels != 1 else ''}"
            print(f"glassgrad: compiling {what} for {self.device}...", end="", file=sys.stderr, flush=True)

    def __enter__(self) -> CompileProgress:
        if self.timer is not None:
            self.timer.daemon = True  # never keeps the process alive
            self.timer.start()
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.shown:
                ending = "failed" if kind is not None else f"done in {time.perf_counter() - self.started:.1f} s"
                print(f" {ending}", file=sys.stderr, flush=True)
