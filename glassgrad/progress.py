"""A progress bar for loops, as tinygrad's helpers.tqdm and trange (tqdm's names and the calls scripts make)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO


class tqdm:  # noqa: N801  (tqdm's and tinygrad's name)
    """Wraps an iterable and draws `desc  42%|████      | 42/100 [00:03<00:04, 12.00it/s]` on stderr as it goes."""

    def __init__(self, iterable: Iterable[Any] | None = None, desc: str = "", disable: bool = False,
                 unit: str = "it", total: int | None = None, file: TextIO | None = None):  # fmt: skip
        self.iterable, self.desc, self.disable, self.unit = iterable, desc, disable, unit
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.n, self.file = total, 0, file
        self.start = self._last_draw = time.perf_counter()
        self._draw(force=True)

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("tqdm: nothing to iterate; pass an iterable, or call update() yourself")
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __len__(self) -> int:
        return self.total or 0

    def __enter__(self) -> tqdm:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_description(self, desc: str, refresh: bool = True) -> None:
        """Text shown before the bar."""
        self.desc = desc
        self._draw(force=refresh)

    def update(self, n: int = 1) -> None:
        """Count `n` more steps done."""
        self.n += n
        self._draw(force=self.total is not None and self.n >= self.total)

    def close(self) -> None:
        """Draw the final state and end the line."""
        if not self.disable:
            self._draw(force=True)
            print(file=self.file or sys.stderr, flush=True)
            self.disable = True

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if self.disable or (not force and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        print("\r" + self.line(now), end="", file=self.file or sys.stderr, flush=True)

    def line(self, now: float | None = None) -> str:
        """The text of the bar as it stands."""
        elapsed = (now or time.perf_counter()) - self.start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        stats = f"{self.n}/{self.total}" if self.total else f"{self.n}{self.unit}"
        times = f"{_clock(elapsed)}<{_clock((self.total - self.n) / rate) if self.total and rate else '?'}"
        tail = f" {stats} [{times}, {rate:.2f}{self.unit}/s]"
        head = f"{self.desc}: " if self.desc else ""
        if not self.total:
            return head + tail.lstrip()
        width = max(10, shutil.get_terminal_size((80, 20)).columns - len(head) - len(tail) - 7)
        filled = int(width * min(self.n / self.total, 1.0))
        return f"{head}{100 * self.n // self.total:3d}%|{'█' * filled}{' ' * (width - filled)}|{tail}"


def trange(n: int, **kwargs: Any) -> tqdm:
    """tqdm(range(n)): a progress bar over n steps."""
    return tqdm(range(n), total=n, **kwargs)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"
