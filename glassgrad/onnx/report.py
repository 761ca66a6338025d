"""`python -m glassgrad.onnx.report`: run the ONNX backend node tests and print, per operator, cases passed, failed
and not supported, then the totals in scope and out of scope.

Options: `--device CPU` (default), `--op NAME` (only that operator, repeatable), `-v` (each failure's message).
"""

from __future__ import annotations

import argparse
import collections
import time

from glassgrad.onnx.node_tests import EXCLUDED, collect_cases, run_case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--op", action="append", help="only this operator (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each failed or unsupported case")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    cases = [c for c in collect_cases() if not args.op or c.op in args.op]
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in cases:
        result = run_case(case, args.device)
        counts[case.op][result.status] += 1
        if args.verbose and result.status != "passed":
            print(f"  {result.status:11s} {case.name}: {result.message[:300]}")

    print(f"{'operator':28s} {'passed':>6s} {'failed':>6s} {'unsupp':>6s}  scope")
    totals = {True: collections.Counter(), False: collections.Counter()}
    for op in sorted(counts):
        c, in_scope = counts[op], op not in EXCLUDED
        totals[in_scope].update(c)
        print(f"{op:28s} {c['passed']:6d} {c['failed']:6d} {c['unsupported']:6d}  "
              f"{'yes' if in_scope else 'no: ' + EXCLUDED[op]}")  # fmt: skip
    for in_scope, label in ((True, "in scope"), (False, "out of scope")):
        c = totals[in_scope]
        n = sum(c.values())
        share = f"{100 * c['passed'] / n:.1f}%" if n else "-"
        print(f"{label}: {n} cases, {c['passed']} passed ({share}), {c['failed']} failed, "
              f"{c['unsupported']} not supported")  # fmt: skip
    print(f"{len(cases)} cases in {time.perf_counter() - start:.0f} s on {args.device}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
