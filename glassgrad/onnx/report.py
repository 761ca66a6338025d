"""`python -m glassgrad.onnx.report`: run the ONNX backend node tests and print, per operator, cases passed, failed
and not supported, and how many are out of scope (not run), then the totals and the reasons cases are out of scope.

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
        if (reason := case.out_of_scope) is not None:
            counts[case.op][f"out:{reason}"] += 1
            continue
        result = run_case(case, args.device)
        counts[case.op][result.status] += 1
        if args.verbose and result.status != "passed":
            print(f"  {result.status:11s} {case.name}: {result.message[:300]}")

    print(f"{'operator':26s} {'passed':>6s} {'failed':>6s} {'unsupp':>6s} {'out of scope':>12s}")
    in_scope, out_reasons = collections.Counter(), collections.Counter()
    for op in sorted(counts):
        c = counts[op]
        outside = sum(n for k, n in c.items() if k.startswith("out:"))
        note = "  (operator out of scope)" if op in EXCLUDED else ""
        print(f"{op:26s} {c['passed']:6d} {c['failed']:6d} {c['unsupported']:6d} {outside:12d}{note}")
        in_scope.update({k: n for k, n in c.items() if not k.startswith("out:")})
        out_reasons.update({k[4:]: n for k, n in c.items() if k.startswith("out:")})
    n = sum(in_scope.values())
    share = f"{100 * in_scope['passed'] / n:.1f}%" if n else "-"
    print(f"in scope: {n} cases, {in_scope['passed']} passed ({share}), {in_scope['failed']} failed, "
          f"{in_scope['unsupported']} not supported")  # fmt: skip
    print(f"out of scope: {sum(out_reasons.values())} cases, not run:")
    for reason, k in out_reasons.most_common():
        print(f"  {k:5d}  {reason}")
    print(f"{len(cases)} cases in {time.perf_counter() - start:.0f} s on {args.device}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
