"""Failures known today, each waiting for a fix that another branch is making (issue 17). The CI test
(test/test_fuzz.py) leaves these ops and features out of the programs it generates; when a fix merges, remove its
entries and the CI test covers them again. Names are op names (`python -m test.fuzz --list-ops`) or the features
that program.run_step and the op builders name."""

# the corners of programs that the generator and runner name (a step's or an input's features)
FEATURES = ("index-oob", "int-div-zero", "int-min-div", "narrow-int-wrap", "var-extreme", "float-divmod-special",
            "float-divmod-rounding", "const-leaf", "nonfinite-grad", "prod-zero-overflow")  # fmt: skip

KNOWN_FAILURES: dict[str, str] = {}  # none: every fix of issue 17 has landed
