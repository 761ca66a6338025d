"""A differential fuzzer: random programs of movement, elementwise, reduction, indexing and matmul ops over random
shapes, dtypes and layouts, run in glassgrad and in PyTorch (with C's meaning for the unsigned dtypes PyTorch cannot
compute), comparing values, dtypes and gradients. `python -m test.fuzz --help` says how to run it."""
