"""GlobalCounters: running totals of the work glassgrad has done, for DEBUG output and tests."""


class GlobalCounters:
    """Kernels run, operations and bytes they did, time spent in them, and device memory in use."""

    kernel_count: int = 0  # kernels run
    global_ops: int = 0  # their arithmetic operations, as the kernels' specs count them
    global_mem: int = 0  # bytes they read and wrote
    time_sum_s: float = 0.0  # seconds they took, where timed (DEBUG>=2)
    mem_used: int = 0  # bytes of device buffers allocated now
    mem_peak: int = 0  # the most mem_used has been since the last reset

    @staticmethod
    def add_memory(nbytes: int) -> None:
        """Count a new allocation, keeping the peak."""
        GlobalCounters.mem_used += nbytes
        GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)

    @staticmethod
    def reset() -> None:
        """Zero every counter except mem_used, which tracks live buffers (the peak restarts from it)."""
        GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.global_mem = 0
        GlobalCounters.time_sum_s = 0.0
        GlobalCounters.mem_peak = GlobalCounters.mem_used
