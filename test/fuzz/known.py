"""Failures known today, each waiting for a fix that another branch is making (issue 17). The CI test
(test/test_fuzz.py) leaves these ops and features out of the programs it generates; when a fix merges, remove its
entries and the CI test covers them again. Names are op names (`python -m test.fuzz --list-ops`) or the features
that program.run_step and the op builders name."""

# the corners of programs that the generator and runner name (a step's or an input's features)
FEATURES = ("index-oob", "int-div-zero", "int-min-div", "narrow-int-wrap", "var-extreme", "float-divmod-special",
            "float-divmod-rounding", "const-leaf", "nonfinite-grad", "prod-zero-overflow")  # fmt: skip

KNOWN_FAILURES: dict[str, str] = {
    # features: the step is generated only where it is not excluded
    "index-oob": "an index out of range (x[t], gather) gives zeros instead of IndexError: the device-side error flag",
    "int-div-zero": "integer // 0 and % 0 crash the process (SIGILL/SIGFPE) instead of ZeroDivisionError",
    "int-min-div": "INT_MIN // -1 and INT_MIN % -1 crash the process with SIGFPE",
    "narrow-int-wrap": "an int8/uint8/int16/uint16 result that overflows is not kept to its width when a later op "
    "reads it (uint8 << 7 cast to double gives 768): the dtype-width fix",
    "var-extreme": "NEW (found by this fuzzer, no branch fixes it yet): var/std of values with an inf has a NaN "
    "gradient everywhere (PyTorch: +-inf, its 2 (x - mean) / (N - 1)), and of values near the dtype's limit "
    "(3e38 in float32) overflows to inf where PyTorch's is finite (1.3e38), its gradient then 0",
    "float-divmod-special": "NEW: float // and % are floor(x * (1 / y)) and x - that * y (tensor.py div), so "
    "x % +-inf is NaN (Python and PyTorch: x or +-inf), +-inf // y is +-inf (NaN), the gradient of x % 0 is NaN (1)",
    "float-divmod-rounding": "NEW: the same x * (1 / y) is rounded to the dtype before the floor, so x // y is off "
    "by one where x / y is within a rounding of a whole number (bfloat16 2.71875 // 0.38867 is 7, PyTorch 6), and "
    "x % y loses |x / y| roundings of y (float16 253 % -0.44 is -0.25, PyTorch -0.2065); PyTorch divides exactly",
    "const-leaf": "NEW: Tensor(2.0, requires_grad=True) is the interned CONST 2.0, so its gradient collects the "
    "gradient of every other 2.0 in the graph: (x * 2.0 + c).sum().gradient(c) is 5.0 for x = [1., 2.] (PyTorch 2.0)",
    "nonfinite-grad": "gradients through values holding inf or NaN: ops whose derivative is 0 there (floor, the "
    "side of maximum/minimum not taken, a masked or zeroed branch, prod with zeros) give 0 * inf = NaN where PyTorch "
    "gives 0 (the gradient of max through a matmul, issue 17): the autograd fix; the CI checks gradients only of "
    "programs whose values are finite",
    "prod-zero-overflow": "prod of values with a zero whose other values overflow (or hold inf/NaN) is NaN where "
    "PyTorch gives 0 or -0: the prod fix",
    # ops whose gradients are NaN at the edges of their domain (x = +-1, x = 0 ** n): the autograd fixes
    "acos": "gradient at +-1 is NaN where PyTorch gives -inf",
    "asin": "gradient at +-1 is NaN where PyTorch gives inf",
    "acosh": "gradient at 1 and below is NaN where PyTorch gives 0 or inf; far below -1 the value is 0 or -inf, not "
    "NaN (the autograd branch fixes both)",
    "atanh": "gradient at and beyond +-1 is NaN where PyTorch gives numbers or inf",
    "pow": "gradient at 0 ** n and of negative bases is NaN or inf where PyTorch differs",
}
