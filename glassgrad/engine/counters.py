"""GlobalCounters: running totals of the work glassgrad has done, for DEBUG output and tests."""


class GlobalCounters:
    """Kernels run, operations and bytes they did, time spent in them, and device memory in use."""

    kernel_count: int = 0
    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0
    mem_used: int = 0

    @staticmethod
    def reset() -> None:
        """Zero every counter except mem_used, which tracks live buffers."""
        GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.global_mem = 0
        GlobalCounters.time_sum_s = 0.0
