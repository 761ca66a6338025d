"""python -m test.fuzz --cases N [--seed S] [--ops ...] [--device CPU|PYTHON] [--verbose]: the differential fuzzer.

Case i of a run has seed S + i: `--seed K --cases 1` runs case K alone. Exit code 1 if any case failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading

from .driver import Options, Result, run_cases, run_guarded, run_parallel, summary, timed
from .generator import FAMILIES, OPS
from .known import KNOWN_FAILURES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m test.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", nargs="+", help=f"ops or families to use (families: {', '.join(FAMILIES)})")
    p.add_argument("--exclude", nargs="+", default=[], help="ops or features to leave out")
    p.add_argument("--skip-known", action="store_true", help="leave out the known failures (test/fuzz/known.py)")
    p.add_argument("--device", choices=("CPU", "PYTHON"), help="the device of every case (default: mostly CPU)")
    p.add_argument("--in-process", action="store_true", help="no child process (a crash ends the run)")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--verbose", "-v", action="store_true", help="a line per case")
    p.add_argument("--jobs", "-j", type=int, default=1, help="child processes side by side (each a share of the cases)")
    p.add_argument("--results", help="append each case's result to this file as a JSON line (kept if the run stops)")
    p.add_argument("--summarize", nargs="+", metavar="FILE", help="only print the summary of --results files")
    p.add_argument("--rerun", metavar="FILE", help="run again the cases that failed in a --results file")
    p.add_argument("--list-ops", action="store_true")
    args = p.parse_args(argv)
    if args.list_ops:
        for name, (family, _) in sorted(OPS.items(), key=lambda kv: (kv[1][0], kv[0])):
            print(f"{family:10} {name}")
        return 0
    if args.summarize:
        results = [Result(**json.loads(line)) for f in args.summarize for line in open(f) if line.strip()]
        print(summary(results, 0.0))
        return 1 if any(r.kind for r in results) else 0
    exclude = frozenset(args.exclude) | (frozenset(KNOWN_FAILURES) if args.skip_known else frozenset())
    opts = Options(args.device, args.ops, exclude, not args.no_shrink)
    seeds = list(range(args.seed, args.seed + args.cases))
    if args.rerun:
        seeds = sorted({r["seed"] for line in open(args.rerun) if line.strip() and (r := json.loads(line))["kind"]})
    done = [0, 0]
    lock = threading.Lock()
    out = open(args.results, "a") if args.results else None

    def report(r) -> None:
        with lock:
            _report(r)

    def _report(r) -> None:
        if out:
            out.write(json.dumps(dataclasses.asdict(r)) + "\n")
            out.flush()
        done[0] += 1
        done[1] += bool(r.kind)
        if args.verbose or r.kind:
            status = "ok" if not r.kind else f"FAIL {r.kind}"
            print(f"[{done[0]}/{len(seeds)}] seed {r.seed}: {status}  ({' '.join(r.ops)})", flush=True)
        if r.kind:  # every failure with its reproducer (the summary repeats one per kind)
            print(f"  {r.message.strip()[:2000]}\n{r.reproducer}\n", flush=True)
        elif done[0] % 100 == 0:
            print(f"[{done[0]}/{len(seeds)}] {done[1]} failed so far", flush=True)

    run = run_cases if args.in_process else run_guarded
    if args.jobs > 1 and not args.in_process:
        run = lambda seeds, opts, report: run_parallel(seeds, opts, report, args.jobs)  # noqa: E731
    results, seconds = timed(run, seeds, opts, report)
    print("\n" + summary(results, seconds), flush=True)
    return 1 if any(r.kind for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
